"""The Problem the options describe (over a config file's [problem]), and the options that
describe a Problem again: the resume command a person copies, or its Python call."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from ..problem import Problem, default_input_shape, default_max_global_batch
from .shared import DEFAULT_STORAGE, CommandOptions, ProblemOptions
from .spec import defaults


def problem_from_options(options: ProblemOptions, base: Problem | None = None) -> Problem:
    """Flags override the file's [problem]; unset flags keep it (or the defaults)."""
    values = base.to_dict() if base else {}
    if options.model:
        if base and options.model != base.model:
            for key in (
                "input_shape",
                "task",
                "seq_len",
                "inputs",
                "max_predictions",
                "attention_dropout",
                "decoder_seq_len",
            ):
                values.pop(key, None)
        values["model"] = options.model
    given = {
        "batch_size": options.batch_size,
        "ipus": options.ipus,
        "num_classes": options.num_classes,
        "optimizer": options.optimizer,
        "target": options.target,
        "global_batch": options.global_batch,
        "dataset_size": options.dataset_size,
        "host_memory_gb": options.host_memory,
        "max_global_batch": options.max_global_batch,
        "task": options.task,
        "seq_len": options.seq_len,
        "inputs": list(options.inputs) if options.inputs is not None else None,
        "max_predictions": options.max_predictions,
        "attention_dropout": options.attention_dropout,
        "trainer": options.trainer,
        "decoder_seq_len": options.decoder_seq_len,
    }
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
        values.pop(
            "decoder_seq_len", None
        )  # the file's followed its own seq_len and task: the default again
    if "model" not in values:
        raise UsageError("name a model (e.g. resnet50) or give --config with a [problem] table")
    if "batch_size" not in values:
        raise UsageError("give --batch-size (the micro-batch per replica)")
    from ..rules.cross_field import check_problem

    problem = Problem.from_dict(values, "problem")
    check_problem(problem)
    return problem


def resume_keywords(problem: Problem, storage: str, study: str) -> dict[str, Any]:
    """The options, by field name, that define `problem` and its study where they differ from
    the defaults: what a resume command or call gives (the storage's password masked)."""
    from ..study.storage import mask_url

    out: dict[str, Any] = {"batch_size": problem.batch_size}
    defaults = Problem(problem.model, problem.batch_size)
    if problem.ipus != defaults.ipus:
        out["ipus"] = problem.ipus
    if problem.inputs:
        out["inputs"] = list(problem.inputs)
    elif problem.input_shape != default_input_shape(problem.model, problem.seq_len):
        out["input_shape"] = problem.input_shape
    defaults = replace(
        defaults, max_global_batch=default_max_global_batch(problem.model, problem.task)
    )
    for key in (
        "num_classes",
        "optimizer",
        "target",
        "global_batch",
        "dataset_size",
        "max_global_batch",
        "task",
        "seq_len",
        "decoder_seq_len",
        "max_predictions",
        "attention_dropout",
        "trainer",
    ):
        if getattr(problem, key) != getattr(defaults, key):
            out[key] = getattr(problem, key)
    if problem.host_memory_gb != defaults.host_memory_gb:
        out["host_memory"] = problem.host_memory_gb
    if storage != DEFAULT_STORAGE:
        out["storage"] = mask_url(storage)
    if study != problem.slug:
        out["study"] = study
    return out


def changed_options(options: CommandOptions, names: tuple[str, ...]) -> dict[str, Any]:
    """These options, by field name, where they differ from their defaults."""
    default = defaults(type(options))
    return {
        name: getattr(options, name)
        for name in names
        if name not in default or getattr(options, name) != default[name]
    }


def _flag_text(key: str, value: object) -> str:
    """A value as a resume command writes it: (3, 32, 32) -> '3,32,32'; {'low': 8, 'high': 64}
    -> '8-64'; the host memory without a needless '.0'."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, dict) and {"low", "high"} <= set(value):
        return f"{value['low']}-{value['high']}"
    if key == "host_memory" and isinstance(value, float):
        return f"{value:g}"
    return str(value)


def command_line(model: str, keywords: dict[str, Any]) -> str:
    """`ipu-autotune MODEL --flag value ...`: the command these options are, for a person to
    copy (never parsed back by the tool)."""
    parts = ["ipu-autotune", model]
    for key, value in keywords.items():
        flag = "--input" if key == "inputs" else "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif key == "inputs":
            parts += [w for spec in value for w in (flag, spec)]
        else:
            parts += [flag, _flag_text(key, value)]
    return shlex.join(parts)


def python_call(model: str, keywords: dict[str, Any]) -> str:
    """The same as the Python API's call, for a model only Python can give (object:NAME):
    "ipu_autotune.tune(model, name='Net', batch_size=8, no_numerics=True)"."""
    given = {"name": model.partition(":")[2], **keywords}
    return "ipu_autotune.tune(model, " + ", ".join(f"{k}={v!r}" for k, v in given.items()) + ")"


def resume_command(problem: Problem, storage: str, study: str) -> str:
    """The command that opens this problem's study again."""
    return command_line(problem.model, resume_keywords(problem, storage, study))
