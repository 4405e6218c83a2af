"""One trial, in a fresh interpreter:
`python -m ipu_autotune.backends.poptorch.child request.json`.

It compiles by executing the exported snippet (`export/python.py`), so what was compiled is exactly
what a user pastes: build the model, `TrainingModel(model)`, `make_options()`,
`make_optimizer(model)`, then `poptorch.trainingModel(...).compile(...)` (inputs, then labels) on
the full host batch. On top of `make_options()` it adds only tuner options: a complete graph
profile even when out of memory, a per-trial report directory, the shared executable cache, and the
offline target (memory only) or on-demand attachment and synthetic data (timed run).

It always tries to write `result.json`; the parent treats a missing result as a crash. A
fresh process per trial because PopTorch wraps the model in place, freezes the options and
keeps the last error and device state in globals (reference §9.1).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ...host import pipeline as host
from ...problem import Config, Problem
from .errors import ERROR_LOG, CaughtError, oom_evidence, read_text
from .profile import find_profile, read_profile

#: poptorch.Options.useOfflineIpuTarget versions (1 Mk1, 2 Mk2; Bow: a Mk2 at a higher clock).
IPU_VERSION = {"mk1": 1, "mk2": 2, "bow": 2}


def log(msg: str) -> None:
    print(f"[trial {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_snippet(path: str | Path) -> dict[str, Any]:
    """Execute the exported snippet; its namespace has annotate, TrainingModel, make_options..."""
    return run_snippet(Path(path).read_text(), str(path))


def run_snippet(source: str, filename: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "ipu_autotune_trial_snippet", "__file__": filename}
    exec(compile(source, filename, "exec"), ns)
    return ns


def add_tuner_options(
    opts: Any, poptorch: Any, request: dict[str, Any], problem: Problem, hardware: bool
) -> Any:
    """The options the tuner needs and a user's paste does not (reference §3.6, §9)."""
    # setEngineOptions replaces the whole dict (pitfall 7): merge with what is there.
    engine = dict(opts._Popart.options.get("engineOptions", {}))
    engine.update(
        {
            # lay out the whole graph, so the profile is complete
            "debug.allowOutOfMemory": "true",
            "autoReport.outputGraphProfile": "true",
            "autoReport.outputExecutionProfile": "false",  # instrumentation would cost memory
            "autoReport.directory": str(request["report_dir"]),
        }
    )
    opts._Popart.setEngineOptions(engine)
    if request.get("cache_dir"):
        opts.enableExecutableCaching(str(request["cache_dir"]))
    if hardware:
        # Attach after compiling, not during (pitfall 3); no host I/O in the timed run.
        opts.connectionType(poptorch.ConnectionType.OnDemand)
        opts.enableSyntheticData(True)
    else:
        opts.useOfflineIpuTarget(IPU_VERSION[problem.target])
    return opts


def host_batch(problem: Problem, config: Config, input_dtype: Any) -> tuple[Any, ...]:
    """The full host batch compile() needs (micro-batch x device iterations x replicas x GA), as
    the positional arguments of the snippet's TrainingModel.forward: the image and its labels,
    or each named input in order, then the labels (hf: models: as their task names them)."""
    import torch

    from ...models import hf
    from ...models.inputs import problem_inputs, sample_batch

    n = host.samples_per_call(problem, config)
    # One sample broadcast to the full batch (stride 0): a compile needs the shape, not the
    # values, and micro-batch 512 x accumulation 128 x device iterations 64 would be tens of GB.
    if not problem_inputs(problem):
        dtype = torch.uint8 if config.eight_bit_io else input_dtype
        x = torch.zeros((1, *problem.input_shape), dtype=dtype).expand(n, *problem.input_shape)
        labels = torch.zeros(1, dtype=torch.long).expand(n)
        return x, labels
    # In their declared dtypes, as the user's loader sends them: the snippet's TrainingModel
    # casts float inputs to INPUT_DTYPE on the IPU; token ids stay integers; masks are ones.
    one = sample_batch(problem, 1, device="cpu")
    if not hf.is_hf(problem.model):
        one["labels"] = torch.zeros(1, dtype=torch.long)
    return tuple(t.expand(n, *t.shape[1:]) for t in one.values())


def refusal(problem: Problem, config: Config) -> str | None:
    """Why this call's host batch must not be allocated, or None.

    Real PopTorch makes every non-contiguous input contiguous (python/_args_parser.py), so
    the stride-0 batch of `host_batch` is allocated in full once compile() sees it: check
    what that costs against the problem's host memory and dataset before touching it.
    """
    from ...rules.cross_field import HOST_BATCH_RULES

    for rule in HOST_BATCH_RULES:
        found = rule(problem, config)
        if found:
            return found
    n = host.samples_per_call(problem, config)
    contiguous = n * host.sample_bytes(problem, config)
    if contiguous > problem.host_memory_gb * 1e9:
        return (
            f"the host batch of one call is {contiguous / 1e9:.1f} GB ({n:,} samples), above "
            f"--host-memory {problem.host_memory_gb:g} GB"
        )
    return None


def _caught(exc: BaseException, poptorch: Any) -> CaughtError:
    return CaughtError.from_exception(exc, poptorch)


def _read_memory(request: dict[str, Any], config: Config, result: dict[str, Any]) -> None:
    path = find_profile(request["report_dir"])
    result["profile_path"] = str(path) if path else None
    if path is None:
        return
    try:
        result["memory"] = read_profile(path, config.ipus_per_replica).to_dict()
    except Exception as exc:  # a profile we cannot read must not hide the compile's verdict
        result["profile_error"] = CaughtError.from_exception(exc).summary()


def _time_runs(
    training: Any,
    batch: tuple[Any, ...],
    problem: Problem,
    config: Config,
    request: dict[str, Any],
) -> dict[str, Any]:
    """Warm-up calls, then timed calls; samples/s of the whole system (reference §6)."""
    for _ in range(int(request.get("warmup_calls", 2))):
        training(*batch)
    calls = max(1, int(request.get("timed_calls", 5)))
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        training(*batch)
        seconds.append(time.perf_counter() - start)
    per_call = sum(seconds) / len(seconds)
    samples = host.samples_per_call(problem, config)
    return {
        "seconds_per_call": per_call,
        "calls": calls,
        "samples_per_call": samples,
        "throughput": samples / per_call if per_call > 0 else None,
        "step_time_s": per_call / config.device_iterations,
        "call_seconds": seconds,
    }


def sdk_label(poptorch: Any) -> str:
    """The SDK a compile ran on, as the calibration store keys it (docs/calibration.md)."""
    return f"poptorch-{getattr(poptorch, '__version__', 'unknown')}"


def run_trial(request: dict[str, Any]) -> dict[str, Any]:
    problem = Problem.from_dict(request["problem"])
    config = Config.from_dict(request["config"])
    result: dict[str, Any] = {
        "status": "setup_error",
        "phase": "setup",
        "error": None,
        "hardware": False,
        "memory": None,
        "profile_path": None,
        "timing": None,
        "compile_seconds": None,
    }
    try:
        import poptorch
        import torch
    except Exception as exc:
        result["error"] = CaughtError.from_exception(exc).to_dict()
        return result
    result["sdk"] = sdk_label(poptorch)

    refused = refusal(problem, config)  # before the model, the options or the host batch exist
    if refused:
        result.update(
            status="refused", reason=f"refused before allocating the host batch: {refused}"
        )
        log(result["reason"])
        return result
    try:
        from ...models.zoo import build_model

        log(f"building {problem.model} on the CPU")
        # The user's model as the problem describes it (its attention dropout); the masked-token
        # gather of --max-predictions is the snippet's TrainingModel's, not the model's.
        described = {k: v for k, v in problem.hf_options if k == "attention_dropout"}
        if request.get("model_path"):  # a Python object the parent pickled (models/objects.py)
            import pickle

            model = pickle.loads(Path(request["model_path"]).read_bytes()).train()
        else:
            model = build_model(
                problem.model, problem.num_classes, device="cpu", task=problem.task, **described
            )
        ns = load_snippet(request["snippet_path"])
        result["phase"] = "annotate"  # from here on, a failure is the configuration's
        model = ns["TrainingModel"](model)
        result["phase"] = "options"
        opts = ns["make_options"]()
        total = config.ipus_per_replica * config.replicas
        hardware = bool(request.get("time_runs")) and bool(poptorch.ipuHardwareIsAvailable(total))
        result["hardware"] = hardware
        add_tuner_options(opts, poptorch, request, problem, hardware)
        Path(request["options_path"]).write_text(repr(opts) + "\n")  # never toDict (pitfall 13)
        optimizer = (
            ns["make_optimizer"](model, lr=request["lr"])
            if request.get("lr") is not None
            else ns["make_optimizer"](model)
        )
        batch = host_batch(problem, config, ns.get("INPUT_DTYPE", torch.float))
        result["phase"] = "compile"
        training = poptorch.trainingModel(model, opts, optimizer)
        log(
            f"compiling: host batch {', '.join(f'{tuple(t.shape)} {t.dtype}' for t in batch)}, "
            f"{'IPUs attached' if hardware else 'offline target'}"
        )
        start = time.perf_counter()
        try:
            training.compile(*batch)
        finally:
            result["compile_seconds"] = round(time.perf_counter() - start, 3)
    except Exception as exc:
        error = _caught(exc, poptorch)  # first: the fields are class-level "last error" state
        result["error"] = error.to_dict()
        log(f"{result['phase']} failed: {error.summary()}")
        if result["phase"] != "compile":
            result["traceback"] = traceback.format_exc(limit=8)
            return result
        sys.stdout.flush()
        sys.stderr.flush()
        _read_memory(request, config, result)
        overflow = sum((result["memory"] or {}).get("overflow_bytes", []) or [0])
        evidence = oom_evidence(
            error,
            read_text(Path.cwd() / ERROR_LOG),
            read_text(Path(request["log_path"])),
            overflow,
        )
        result["oom_evidence"] = evidence
        result["status"] = "oom" if evidence else "compile_error"
        return result

    log(f"compiled in {result['compile_seconds']:.1f} s")
    result["status"] = "ok"
    _read_memory(request, config, result)
    if hardware:
        result["phase"] = "run"
        try:
            result["timing"] = _time_runs(training, batch, problem, config, request)
            log(f"{result['timing']['throughput']:.1f} samples/s")
        except Exception as exc:
            result["run_error"] = _caught(exc, poptorch).to_dict()
            log(f"timed run failed: {CaughtError.from_dict(result['run_error']).summary()}")
    return result


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    """Atomically: the parent must never read half a result."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(
            "usage: python -m ipu_autotune.backends.poptorch.child request.json", file=sys.stderr
        )
        return 2
    request = json.loads(Path(argv[0]).read_text())
    try:
        result = run_trial(request)
    except Exception as exc:  # a bug in this script: still leave a result that says so
        traceback.print_exc()
        result = {
            "status": "setup_error",
            "phase": "child",
            "error": CaughtError.from_exception(exc).to_dict(),
        }
    write_result(request["result_path"], result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
