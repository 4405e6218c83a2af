"""Argument definitions and defaults shared by the subcommands, and the problem they describe.

The command layer (`cli`, the `commands` package) imports this; nothing below it does.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace
from typing import Any

from .errors import UsageError
from .models.hf import TASKS
from .models.hf_config import DEFAULT_SEQ_LEN
from .parsing import OPTIMIZERS, TARGETS, TRAINERS
from .problem import Problem, default_input_shape, default_max_global_batch

DEFAULT_STORAGE = "sqlite:///ipu-autotune.db"
DEFAULT_TRIALS = 60
DEFAULT_OUT = "ipu-autotune-out"
#: seconds between a worker's heartbeats (storage.HEARTBEAT_INTERVAL_S)
DEFAULT_HEARTBEAT = 10
#: the estimator's verdicts near capacity are not to be trusted with hardware time
DEFAULT_HEADROOM = 0.05
#: the chance to fit by the error bar an estimate needs to count as fitting (backends/estimate/error_bars.py)
DEFAULT_FIT_CONFIDENCE = 0.9


def positive(kind: type):
    """An argparse type: a positive int or float."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


_positive_int = positive(int)


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected C,H,W such as 3,224,224, got {text!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise argparse.ArgumentTypeError(f"dimensions must be positive, got {text!r}")
    return shape


def add_problem_args(p: argparse.ArgumentParser, model_required: bool = True, hardware: bool = True) -> None:
    """The Problem's flags; `hardware=False` leaves out the IPUs, the training recipe and the
    host (--ipus, --target, --global-batch, the data group), for commands that run on the CPU
    only, so their --help lists only options they use."""
    p.add_argument("model", nargs=None if model_required else "?",
                   help="torchvision model name (resnet50, vit_b_16, ...), hf:NAME, or package.module:factory "
                        "(the module must be importable: installed or on PYTHONPATH, e.g. PYTHONPATH=.)")
    p.add_argument("--batch-size", "-b", type=_positive_int, required=model_required,
                   help="micro-batch per replica")
    if hardware:
        p.add_argument("--ipus", type=_positive_int, default=None, help="IPUs available in total (default 2)")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--input-shape", type=_shape, help="one sample's shape, e.g. 3,224,224")
    shape.add_argument("--image-size", type=_positive_int,
                       help="square RGB images of this size (default 64 for CNNs, the workshop's size; 224 for ViT/Swin)")
    p.add_argument("--num-classes", type=_positive_int, default=None, help="classes (default 1000)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None, help="optimizer (default adamw)")
    if hardware:
        p.add_argument("--target", choices=TARGETS, default=None, help="IPU generation (default mk2)")
        p.add_argument("--global-batch", type=_positive_int, default=None,
                       help="fix micro-batch x gradient accumulation x replicas to this")
        p.add_argument("--trainer", choices=TRAINERS, default=None,
                       help="hf: models: what trains the result: poptorch (the exported PopTorch snippet, the "
                            "default) or optimum (optimum-graphcore's IPUTrainer with the exported "
                            "ipu_config.json; the search keeps to what IPUConfig can express)")
    p.add_argument("--task", choices=tuple(TASKS), default=None,
                   help="hf: models: the head and loss trained (default: sequence-classification for "
                        "encoders, causal-lm for decoders, seq2seq-lm for encoder-decoders, "
                        "image-classification for ViT)")
    p.add_argument("--seq-len", type=_positive_int, default=None,
                   help=f"hf: models: tokens per sample (default {DEFAULT_SEQ_LEN})")
    p.add_argument("--decoder-seq-len", type=_positive_int, default=None, metavar="N",
                   help="hf: seq2seq-lm: decoder tokens per sample (default: --seq-len, at most 128)")
    p.add_argument("--max-predictions", type=_positive_int, default=None, metavar="N",
                   help="hf: masked-lm: gather N masked positions per sequence before the head, as "
                        "Graphcore pretrains BERT (20 at --seq-len 128, 76 at 512; default: every position)")
    p.add_argument("--attention-dropout", type=float, default=None, metavar="P",
                   help="hf: models: dropout on the attention probabilities (default: the checkpoint's; "
                        "Graphcore pretrains BERT with 0)")
    p.add_argument("--input", action="append", default=None, metavar="NAME:SHAPE:DTYPE", dest="inputs",
                   help="a forward input of a module:factory model, one per input, in order, passed by "
                        "name; SHAPE is one sample's, e.g. --input input_ids:128:int64 "
                        "--input attention_mask:128:int64 (dtypes: int64 int32 float32 float16 bool)")
    if not hardware:
        return
    data = p.add_argument_group("data and host (end-to-end throughput)")
    data.add_argument("--dataset-size", type=_positive_int, default=None,
                      help="samples per epoch (default 50,000: the workshop's CIFAR-10); one call may not need more")
    data.add_argument("--host-memory", type=positive(float), default=None, metavar="GB",
                      help="host memory one call's samples may take, times the loader's buffers (default 32)")
    data.add_argument("--max-global-batch", type=_positive_int, default=None,
                      help="ceiling on micro-batch x accumulation x replicas (default 2048; 256 when "
                           "fine-tuning an hf: model for sequence-classification or question-answering; "
                           "README, 'Training recipe')")


def add_data_arg(p: argparse.ArgumentParser) -> None:
    """--data for tune and estimate (numerics has its own, for gradient statistics)."""
    p.add_argument("--data", metavar="MODULE:FUNCTION",
                   help="your Dataset or DataLoader: its host cost per sample is timed on this CPU "
                        "(default: costs calibrated on the workshop's epoch times)")


def problem_from_args(args, base: Problem | None = None) -> Problem:
    """Flags override the file's [problem]; unset flags keep it (or the defaults)."""
    values = base.to_dict() if base else {}
    if args.model:
        if base and args.model != base.model:
            for key in ("input_shape", "task", "seq_len", "inputs", "max_predictions", "attention_dropout",
                        "decoder_seq_len"):
                values.pop(key, None)
        values["model"] = args.model
    for flag, key in (("batch_size", "batch_size"), ("ipus", "ipus"), ("num_classes", "num_classes"),
                      ("optimizer", "optimizer"), ("target", "target"), ("global_batch", "global_batch"),
                      ("dataset_size", "dataset_size"), ("host_memory", "host_memory_gb"),
                      ("max_global_batch", "max_global_batch"),
                      ("task", "task"), ("seq_len", "seq_len"), ("inputs", "inputs"),
                      ("max_predictions", "max_predictions"), ("attention_dropout", "attention_dropout"),
                      ("trainer", "trainer"), ("decoder_seq_len", "decoder_seq_len")):
        if getattr(args, flag, None) is not None:
            values[key] = getattr(args, flag)
    if getattr(args, "input_shape", None):
        values["input_shape"] = list(args.input_shape)
        if getattr(args, "seq_len", None) is None:  # an hf: model's tokens: the new shape, not the file's
            values.pop("seq_len", None)
    elif getattr(args, "image_size", None):
        values["input_shape"] = [3, args.image_size, args.image_size]
    elif getattr(args, "seq_len", None) is not None:
        values.pop("input_shape", None)  # the file's shape was its sequence length
    new_tokens = getattr(args, "seq_len", None) is not None or getattr(args, "task", None) or \
        getattr(args, "input_shape", None)
    if new_tokens and getattr(args, "decoder_seq_len", None) is None:
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
