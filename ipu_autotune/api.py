"""The Python API: `ipu_autotune.tune(model, batch_size=64)`, `ipu_autotune.estimate(...)` and
`ipu_autotune.verify(...)`.

A call is the command run in this process. Its options are the command's own options object
(`TuneOptions`, `EstimateOptions`, `VerifyOptions`: options/table.py), given whole and/or as
keywords, its fields by name (`batch_size` for `--batch-size`); each value is checked as its
flag is (options/keywords.py), so defaults, checks and messages are the CLI's, and no value is
written out as flag text. Then `commands.tune` / `commands.estimate` / `commands.verify` run as
for the command. Bad input raises the CLI's `UsageError` with the same one-line message.
`model` may also be an `nn.Module` or a zero-argument callable (models/objects.py: how such a
model is named).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import UsageError
from .options import CommandOptions, EstimateOptions, TuneOptions, VerifyOptions
from .options.keywords import keyword_specs, with_keywords
from .problem import Config

if TYPE_CHECKING:
    from .api_result import EstimateResult, TuneResult
    from .verification.verdict import Verdict

_Options = TypeVar("_Options", bound=CommandOptions)


def model_string(model: Any, name: str | None = None) -> str:
    """The model as the CLI names it: a string as given, an object registered as object:NAME."""
    if isinstance(model, str):
        if name is not None:
            raise UsageError("name= is for a model object; a model string names itself")
        return model
    from .models import objects
    from .profiles.trace import cached_trace, optimum_trace

    string = objects.register(model, name)
    cached_trace.cache_clear()  # the name may now stand for a changed model: trace it anew
    optimum_trace.cache_clear()
    return string


def _options(
    cls: type[_Options], model: str | None, options: _Options | None, keywords: dict[str, Any]
) -> _Options:
    import optuna

    run = with_keywords(cls, model, keywords, options)
    optuna.logging.set_verbosity(
        optuna.logging.WARNING
    )  # as the CLI: our own output says what happens
    return run


def tune(
    model: object, options: TuneOptions | None = None, *, name: str | None = None, **keywords: Any
) -> TuneResult:
    """Run or resume a study, as `ipu-autotune MODEL --batch-size N ...` does; returns a
    TuneResult.

    `model`: a model string the CLI takes (resnet50, hf:bert-base-uncased, package.module:factory),
    an nn.Module, or a zero-argument callable returning one; `name`: an object model's name
    (default: its class name), so its study is `object-NAME-bs...`. `options`: a TuneOptions;
    keywords set its fields (`ipu-autotune tune --help` lists them), e.g. batch_size=64, trials=20,
    storage="sqlite:///s.db". The first Ctrl-C (a kernel interrupt) stops after the current trial
    and returns the result so far, with `interrupted` set; a second one raises KeyboardInterrupt,
    as on the terminal. With verify=True (and data=), the result's `verdict` is `verify`'s on the
    best config.
    """
    from .api_result import TuneResult
    from .commands.tune import tune_study, verify_outcome
    from .models import objects

    string = model_string(model, name)
    run = _options(TuneOptions, string, options, keywords)
    if objects.is_object(string):
        _check_object_run(run, string)
    outcome = tune_study(run)
    result = TuneResult.from_outcome(outcome)
    result.verdict = verify_outcome(run, outcome)
    return result


def _check_object_run(options: TuneOptions, model: str) -> None:
    """What a model object cannot do: run in --jobs worker processes; pickle badly for PopTorch."""
    from .backends import resolve_backend_name
    from .models import objects

    if options.jobs > 1:
        raise UsageError(
            f"model '{model}': jobs={options.jobs} starts worker processes, which cannot rebuild "
            "a model object; use jobs=1, or a model string (package.module:factory)"
        )
    if resolve_backend_name(options.backend) == "poptorch":
        objects.pickled(model)  # its refusal before any study exists


def estimate(
    model: object = None,
    config: Config | dict[str, Any] | str | Path | None = None,
    options: EstimateOptions | None = None,
    *,
    name: str | None = None,
    **keywords: Any,
) -> EstimateResult:
    """One configuration measured, as `ipu-autotune estimate` does; returns an EstimateResult
    (the per-IPU memory table, the verdict and the throughput as data).

    `config`: a Config, a dict of its keys, or a TOML file path (as --config); unset keys keep
    the default baseline's. `options`: an EstimateOptions; keywords set its fields
    (`ipu-autotune estimate --help`)."""
    from .api_result import EstimateResult
    from .commands.estimate import measured

    string = model_string(model, name) if model is not None else None
    overrides = None
    if isinstance(config, (str, Path)):
        keywords["config"] = config
    elif isinstance(config, Config):
        overrides = config.to_dict()
    elif isinstance(config, dict):
        overrides = dict(config)
    elif config is not None:
        raise UsageError(
            f"config: expected a Config, a dict or a TOML file path, got {type(config).__name__}"
        )
    problem, cfg, m, broken = measured(
        _options(EstimateOptions, string, options, keywords), overrides
    )
    return EstimateResult(problem, cfg, m, broken)


def verify(
    model: object = None,
    options: VerifyOptions | None = None,
    *,
    baseline: Config | str | Path | None = None,
    tuned: Config | str | Path | None = None,
    name: str | None = None,
    **keywords: Any,
) -> Verdict:
    """The tuned recipe trained beside the baseline's, as `ipu-autotune verify` does; returns its
    Verdict (`.kind`, `.passed`, `.line()`, `.runs` with the curves and FP16 counts).

    `tuned`/`baseline`: a Config or a config file path (as --tuned/--baseline); or study="NAME" for
    a study's best against its baseline. `options`: a VerifyOptions; keywords set its fields
    (`ipu-autotune verify --help`), e.g. data="mymodule:loader", steps=100."""
    from .commands.common import console_for
    from .commands.verify import verify as run_verify, verify_configs
    from .options.problem_flags import problem_from_options

    string = model_string(model, name) if model is not None else None
    objects_given = isinstance(tuned, Config) or isinstance(baseline, Config)
    if not objects_given:
        keywords.update(
            {k: v for k, v in (("tuned", tuned), ("baseline", baseline)) if v is not None}
        )
    run = _options(VerifyOptions, string, options, keywords)
    console = console_for(run)
    if not objects_given:
        return run_verify(run, console)
    if tuned is None:
        raise UsageError("verify: baseline= was given as a Config; give tuned= too")
    if not isinstance(tuned, Config) or not isinstance(baseline, (Config, type(None))):
        raise UsageError(
            "verify: give tuned= and baseline= both as Configs, or both as config file paths"
        )
    return verify_configs(run, console, problem_from_options(run), baseline or Config(), tuned)


def keywords(command: str) -> dict[str, Any]:
    """The keywords a Python call of `command` takes (its documented flags), by field name."""
    return dict(keyword_specs(command))


__all__ = [
    "tune",
    "estimate",
    "verify",
    "keywords",
    "TuneOptions",
    "EstimateOptions",
    "VerifyOptions",
]
