"""The parser's flags generated from the options' fields (options.py), the options built from the
parsed flags, and the problem they describe.

The command layer (`cli`, the `commands` package) imports this; nothing below it does.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from .errors import UsageError
from .option_spec import BadValue, defaults, specs
from .options import (  # noqa: F401
    DEFAULT_FIT_CONFIDENCE,
    DEFAULT_HEADROOM,
    DEFAULT_OUT,
    DEFAULT_STORAGE,
    OPTIONS,
    ProblemOptions,
)
from .problem import Problem, default_input_shape, default_max_global_batch


def _argparse_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """A field's check (Spec.convert) as an argparse type: its refusal is argparse's one-line
    message."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = getattr(convert, "__name__", "value")  # argparse names the type in its messages
    return parse


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """The flags of an options class (options.py): each field's flag, its default the field's."""
    default = defaults(cls)
    groups: dict[str, Any] = {}
    for name, spec in specs(cls).items():
        if spec.kind == "positional":
            parser.add_argument(name, nargs=None if spec.required else "?", help=spec.help)
            continue
        if spec.exclusive:
            if spec.exclusive not in groups:
                groups[spec.exclusive] = parser.add_mutually_exclusive_group()
            target = groups[spec.exclusive]
        elif spec.group:
            target = groups.get(spec.group) or groups.setdefault(spec.group, parser.add_argument_group(spec.group))
        else:
            target = parser
        kwargs: dict[str, Any] = {"dest": name, "help": argparse.SUPPRESS if spec.hidden else spec.help}
        if spec.kind == "switch":
            kwargs["action"] = "store_true"
        else:
            kwargs["default"] = None if spec.kind == "repeat" else default.get(name)
            kwargs.update({k: v for k, v in (("metavar", spec.metavar), ("choices", spec.choices)) if v})
            if spec.kind == "repeat":
                kwargs["action"] = "append"
            if spec.convert is not None:
                kwargs["type"] = _argparse_type(spec.convert)
            if spec.required:
                kwargs["required"] = True
        target.add_argument(*spec.flags, **kwargs)


def options_from(namespace: argparse.Namespace, argv: list[str]):
    """The command's options from its parsed flags; `argv`: the command line (--jobs workers run it)."""
    cls = OPTIONS[namespace.command]
    names = {f.name for f in fields(cls)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(namespace).items()
              if k in names and v is not None}
    if "argv" in names:
        values["argv"] = tuple(argv)
    return cls(**values)


def problem_from_args(options: ProblemOptions, base: Problem | None = None) -> Problem:
    """Flags override the file's [problem]; unset flags keep it (or the defaults)."""
    values = base.to_dict() if base else {}
    if options.model:
        if base and options.model != base.model:
            for key in ("input_shape", "task", "seq_len", "inputs", "max_predictions", "attention_dropout",
                        "decoder_seq_len"):
                values.pop(key, None)
        values["model"] = options.model
    given = {"batch_size": options.batch_size, "ipus": options.ipus, "num_classes": options.num_classes,
             "optimizer": options.optimizer, "target": options.target, "global_batch": options.global_batch,
             "dataset_size": options.dataset_size, "host_memory_gb": options.host_memory,
             "max_global_batch": options.max_global_batch, "task": options.task, "seq_len": options.seq_len,
             "inputs": list(options.inputs) if options.inputs is not None else None,
             "max_predictions": options.max_predictions, "attention_dropout": options.attention_dropout,
             "trainer": options.trainer, "decoder_seq_len": options.decoder_seq_len}
    values.update({key: value for key, value in given.items() if value is not None})
    if options.input_shape:
        values["input_shape"] = list(options.input_shape)
        if options.seq_len is None:  # an hf: model's tokens: the new shape, not the file's
            values.pop("seq_len", None)
    elif options.image_size:
        values["input_shape"] = [3, options.image_size, options.image_size]
    elif options.seq_len is not None:
        values.pop("input_shape", None)  # the file's shape was its sequence length
    new_tokens = options.seq_len is not None or options.task or options.input_shape
    if new_tokens and options.decoder_seq_len is None:
        values.pop("decoder_seq_len", None)  # the file's followed its own seq_len and task: the default again
    if "model" not in values:
        raise UsageError("name a model (e.g. resnet50) or give --config with a [problem] table")
    if "batch_size" not in values:
        raise UsageError("give --batch-size (the micro-batch per replica)")
    from .rules.cross_field import check_problem

    problem = Problem.from_dict(values, "problem")
    check_problem(problem)
    return problem


def resume_command(problem: Problem, storage: str, study: str) -> str:
    from .study.storage import mask_url

    parts = ["ipu-autotune", problem.model, "--batch-size", str(problem.batch_size)]
    defaults = Problem(problem.model, problem.batch_size)
    if problem.ipus != defaults.ipus:
        parts += ["--ipus", str(problem.ipus)]
    if problem.inputs:
        for spec in problem.inputs:
            parts += ["--input", spec]
    elif problem.input_shape != default_input_shape(problem.model, problem.seq_len):
        parts += ["--input-shape", ",".join(map(str, problem.input_shape))]
    defaults = replace(defaults, max_global_batch=default_max_global_batch(problem.model, problem.task))
    for key in ("num_classes", "optimizer", "target", "global_batch", "dataset_size", "max_global_batch",
                "task", "seq_len", "decoder_seq_len", "max_predictions", "attention_dropout", "trainer"):
        if getattr(problem, key) != getattr(defaults, key):
            parts += [f"--{key.replace('_', '-')}", str(getattr(problem, key))]
    if problem.host_memory_gb != defaults.host_memory_gb:
        parts += ["--host-memory", f"{problem.host_memory_gb:g}"]
    if storage != DEFAULT_STORAGE:
        parts += ["--storage", mask_url(storage)]
    if study != problem.slug:
        parts += ["--study", study]
    return shlex.join(parts)


def python_call(command: str) -> str:
    """A resume command as the Python API's call, for a model only Python can give (object:NAME):
    'ipu-autotune object:Net --batch-size 8 --no-numerics' -> "ipu_autotune.tune(model,
    name='Net', batch_size=8, no_numerics=True)"."""
    parts = shlex.split(command)[1:]
    name = parts.pop(0).partition(":")[2]
    kwargs: dict[str, Any] = {"name": name}
    while parts:
        key = parts.pop(0)[2:].replace("-", "_")
        if parts and not parts[0].startswith("--"):
            raw = parts.pop(0)
            value: int | str = int(raw) if raw.isdigit() else raw
            if key == "input":  # --input repeats: the keyword takes a list
                kwargs.setdefault("inputs", []).append(value)
                continue
            kwargs[key] = value
        else:
            kwargs[key] = True
    return "ipu_autotune.tune(model, " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
