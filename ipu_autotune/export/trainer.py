"""How to train an exported `ipu_config.json`: a ready-to-run IPUTrainer block.

Every keyword is a real field of `IPUTrainingArguments` (optimum/graphcore/training_args.py):
`fp32` (IPUTrainer halves the model and keeps FP16 optimizer accumulators unless it is set,
trainer.py `IPUTrainer.__init__` and `create_optimizer`), `loss_scaling` (IPUTrainer builds
the optimizer, so the scale goes there, not on an optimizer of yours),
`per_device_train_batch_size` (the micro-batch), `gradient_accumulation_steps` (it overrides
the IPUConfig's when given, so it is given the same value), `lamb`, `dataloader_mode`,
`dataloader_num_workers`, `learning_rate`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..problem import Config, Problem
from ..version import __version__
from .literals import comment_lines, float_literal, int_literal
from .python import ALS_INITIAL_SCALE, learning_rate

#: transformers' Auto class for each --task (optimum's to_pipelined maps it to a Pipelined*)
_BLOCK = '''"""Train with optimum-graphcore: IPUTrainer and the ipu_config.json beside this file.

Found by ipu-autotune {version}.
Usage: train(train_dataset)  # {usage}
"""
{notes}
from pathlib import Path
{imports}
from optimum.graphcore import IPUConfig, IPUTrainer, IPUTrainingArguments
from transformers import {auto}
{helpers}

def train(train_dataset, checkpoint={checkpoint!r}, output_dir="outputs", data_collator={collator}):
    ipu_config = IPUConfig.from_pretrained(str(Path(__file__).resolve().parent))  # ipu_config.json
    model = {auto}.from_pretrained(checkpoint{model_kwargs})
    args = IPUTrainingArguments(
        output_dir=output_dir,
{fields}
    )
    trainer = IPUTrainer(model=model, ipu_config=ipu_config, args=args, train_dataset=train_dataset,
                         data_collator=data_collator)
    return trainer.train()
'''  # noqa: E501 (the generated file's own lines, as written out)


_TOKENS = "a tokenized dataset: input_ids, attention_mask and the task's labels"
# optimum-graphcore's image-classification example (examples/image-classification/
# run_image_classification.py: collate_fn, ApplyTransforms): IPUTrainer takes batches of
# float `pixel_values` and integer `labels`; the model computes its own loss.
_IMAGES = (
    "a dataset of {shape} float pixel_values (the image processor's transforms) and int labels"
)
_IMAGE_COLLATOR = '''

def collate_images(examples):
    """Batches for IPUTrainer, as optimum-graphcore's image-classification example builds them."""
    pixel_values = torch.stack([torch.as_tensor(e["pixel_values"], dtype=torch.float) for e in examples])
    labels = torch.tensor([e["labels"] for e in examples])
    return {"pixel_values": pixel_values, "labels": labels}
'''  # noqa: E501 (the generated file's own lines, as written out)


def training_arguments(
    problem: Problem, config: Config, base_global_batch: int | None = None
) -> dict[str, str]:
    """IPUTrainingArguments keywords, as source text, for what the config trains."""
    from ..host import pipeline

    c = config
    fields = {
        "per_device_train_batch_size": int_literal(pipeline.micro_batch(problem, c)),
        "gradient_accumulation_steps": int_literal(c.gradient_accumulation),
        "fp32": repr(not c.half_weights),
    }
    if (
        c.loss_scaling == "auto"
    ):  # the snippet's starting scale too (export/python.ALS_INITIAL_SCALE)
        fields["auto_loss_scaling"] = "True"
        fields["loss_scaling"] = float_literal(ALS_INITIAL_SCALE)
    elif c.loss_scaling != 1.0:
        fields["loss_scaling"] = float_literal(c.loss_scaling)
    if problem.optimizer == "lamb":
        fields["lamb"] = "True"
    fields["learning_rate"] = learning_rate(problem, c, base_global_batch)[0]
    fields["dataloader_mode"] = repr(c.loader_mode)
    fields["dataloader_num_workers"] = int_literal(c.loader_workers)
    fields["dataloader_drop_last"] = "True"
    return fields


def trainer_notes(config: Config) -> list[str]:
    """What the arguments mean for this config (from the config, so they cannot disagree)."""
    c = config
    notes = [
        "FP16 weights and activations: IPUTrainer halves the model (fp32=False)."
        if c.half_weights
        else "FP32 weights, activations and optimizer state: fp32=True (IPUTrainer would "
        "otherwise halve the model)."
    ]
    if c.loss_scaling == "auto":
        notes.append(
            f"Loss scaling: automatic from {ALS_INITIAL_SCALE:g} (auto_loss_scaling; also in "
            "ipu_config.json)."
        )
    elif c.loss_scaling != 1.0:
        notes.append(
            f"Loss scaling: fixed at {c.loss_scaling:g}, on the optimizer IPUTrainer builds "
            "(loss_scaling)."
        )
    # What IPUConfig._to_options (optimum/graphcore/ipu_configuration.py) sets otherwise than the
    # trial's best_options.py: only an FP32 trial can have stochastic rounding off
    # (optimum_target).
    if not c.stochastic_rounding:
        notes.append(
            "Stochastic rounding: on. IPUTrainer always enables it for training "
            "(IPUConfig._to_options); this trial was estimated, and its best_options.py "
            "compiles, with it off (the estimate's memory and time do not depend on it; the "
            "arithmetic's rounding does)."
        )
    if c.reserved_ipus != c.total_ipus:
        notes.append(
            f"IPUs: IPUTrainer reserves {c.reserved_ipus} for this trial's {c.total_ipus} "
            "(autoRoundNumIPUs, IPUConfig._to_options), as best_options.py does."
        )
    return notes


def render_trainer(
    problem: Problem,
    config: Config,
    notes: Sequence[str] = (),
    base_global_batch: int | None = None,
) -> str:
    from ..models import hf, hf_config

    fields = training_arguments(problem, config, base_global_batch)
    kwargs = (
        f", num_labels={problem.num_classes}" if problem.task == "sequence-classification" else ""
    )
    images = problem.task == "image-classification"
    if (
        images
    ):  # a checkpoint's own head is replaced when its class count differs, as the example does
        kwargs = f", num_labels={problem.num_classes}, ignore_mismatched_sizes=True"
    source = _BLOCK.format(
        version=__version__,
        usage=_IMAGES.format(shape="x".join(map(str, problem.input_shape))) if images else _TOKENS,
        imports="\nimport torch" if images else "",
        helpers=_IMAGE_COLLATOR if images else "",
        collator="collate_images" if images else "None",
        notes=comment_lines("\n".join([*trainer_notes(config), *notes])),
        auto=hf_config.TASKS[problem.task],
        checkpoint=problem.model.removeprefix(hf.PREFIX),
        model_kwargs=kwargs,
        fields="\n".join(f"        {k}={v}," for k, v in fields.items()),
    )
    compile(source, "train_with_optimum.py", "exec")  # never hand out code that does not parse
    return source
