"""The Problem the options describe (over a config file's [problem]), and the command line
that describes a Problem again: the resume command and its Python call."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from ..problem import Problem, default_input_shape, default_max_global_batch
from .table import DEFAULT_STORAGE, ProblemOptions


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
    from ..rules.cross_field import check_problem

    problem = Problem.from_dict(values, "problem")
    check_problem(problem)
    return problem


def resume_command(problem: Problem, storage: str, study: str) -> str:
    from ..study.storage import mask_url

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
