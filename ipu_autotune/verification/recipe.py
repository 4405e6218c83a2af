"""A configuration's training recipe as `verify` runs it: what the export writes (micro-batch x
accumulation x replicas = global batch, the learning rate scaled from the baseline's global
batch, the optimizer and its state type, the loss scale) and the FP16 numerics it sets."""

from __future__ import annotations

from dataclasses import dataclass

from ..batch import global_batch, micro_batch
from ..host import recipe as lr_recipe
from ..problem import Config, Problem

#: where automatic loss scaling starts (export/python.py's ALS_INITIAL_SCALE writes the same
#: into make_optimizer; kept equal by tests/test_verify.py)
ALS_INITIAL_SCALE = 128.0
#: automatic loss scaling, emulated: halve the scale and skip the update on an overflow, double it
#: after this many clean updates (the rule of torch.cuda.amp.GradScaler; PopTorch's ALS moves the
#: scale from gradient histograms instead, poptorch Options.Training.setAutomaticLossScaling)
ALS_GROWTH_INTERVAL = 100


@dataclass(frozen=True)
class Recipe:
    label: str
    optimizer: str
    micro_batch: int
    accumulation: int
    replicas: int
    lr: float
    lr_line: str  # how the rate was reached
    half_compute: bool
    half_weights: bool
    half_state: bool
    loss_scale: float
    auto_loss_scale: bool
    stochastic_rounding: bool
    half_partials: bool

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.accumulation * self.replicas

    def describe(self) -> str:
        """One line: the recipe as the export writes it."""
        precision = ("16.16" if self.half_weights else "16.32") if self.half_compute else "32.32"
        parts = [
            f"{precision}",
            f"micro-batch {self.micro_batch} x {self.accumulation} x {self.replicas} "
            f"= global batch {self.global_batch}",
            f"{self.optimizer} lr {self.lr:g}",
        ]
        if self.half_compute:
            scale = (
                f"auto from {self.loss_scale:g}"
                if self.auto_loss_scale
                else f"{self.loss_scale:g}"
            )
            parts.append(f"loss scale {scale}")
        parts.append(f"optimizer state {'FP16' if self.half_state else 'FP32'}")
        if self.half_weights:
            parts.append(f"stochastic rounding {'on' if self.stochastic_rounding else 'off'}")
        return ", ".join(parts)

    def not_emulated(self) -> list[str]:
        """What the IPU would do that this CPU run does not, plainly (verify prints each line)."""
        out = []
        if self.half_compute:
            out.append(
                "inside one operation (a matmul, a layer norm, a softmax, the loss) the CPU "
                "computes in FP32 and rounds the result to FP16 once; an IPU kernel may also "
                "round intermediates"
            )
            out.append(
                "the optimizer's arithmetic: computed in FP32 from the FP16 gradients, rounded "
                "once where it is stored (FP16 weights, FP16 first-order state)"
            )
            out.append(
                "the tensors' dtype is FP32: model code that reads it (torch.finfo, dtype "
                "checks) sees FP32's limits, e.g. an attention mask at finfo(float32).min "
                "rounds to -inf, not -65504"
            )
        if self.half_partials:
            out.append(
                "half partials: the CPU accumulates matmuls, convolutions and reductions in "
                "FP32 (float partials); see `numerics` for the partials check"
            )
        if self.auto_loss_scale:
            out.append(
                f"automatic loss scaling: emulated as halve-and-skip on overflow, double after "
                f"{ALS_GROWTH_INTERVAL} clean updates (PopTorch's ALS reads gradient histograms)"
            )
        if self.stochastic_rounding:
            out.append(
                "stochastic rounding: on the weight update only (the IPU also rounds other FP16 "
                "ops so)"
            )
        if self.replicas > 1:
            out.append(
                f"{self.replicas} replicas: their micro-batches run one after another, gradients "
                "averaged as the all-reduce does"
            )
        return out

    def fp32_kept(self) -> list[str]:
        """What stays FP32 in this run because the IPU keeps it FP32 (the export's settings)."""
        if not self.half_compute:
            return []
        out = []
        if not self.half_weights:
            out.append(
                "the master weights (16.32): updates added in FP32, the model computes with an "
                "FP16 copy"
            )
        if not self.half_state:
            out.append("the optimizer state (optimizer_state float)")
        elif self.optimizer in ("adam", "adamw", "lamb", "rmsprop"):
            out.append(
                f"{self.optimizer}'s second moment (the export sets "
                "second_order_momentum_accum_type=torch.float32); the first-order state is FP16"
            )
        out.append("the loss scale and the held-out loss (measured in FP32 from the FP16 logits)")
        return out


def recipe_for(
    problem: Problem,
    config: Config,
    label: str,
    base_global_batch: int | None = None,
    base_lr: float | None = None,
) -> Recipe:
    """`config`'s recipe; its learning rate scaled from `base_lr` (default: the rate make_optimizer
    starts from, host/recipe.py) at `base_global_batch` (the baseline's) by the export's rule."""
    base = lr_recipe.base_lr(problem) if base_lr is None else base_lr
    gb = global_batch(problem, config)
    scaled = lr_recipe.scaling(problem.optimizer, base, base_global_batch, gb)
    lr, line = (
        (scaled.lr, scaled.line())
        if scaled
        else (base, f"learning rate {base:g} at global batch {gb}")
    )
    auto = config.loss_scaling == "auto"
    return Recipe(
        label=label,
        optimizer=problem.optimizer,
        micro_batch=micro_batch(problem, config),
        accumulation=config.gradient_accumulation,
        replicas=config.replicas,
        lr=lr,
        lr_line=line,
        half_compute=config.half_compute,
        half_weights=config.half_weights,
        half_state=config.optimizer_state == "half",
        loss_scale=ALS_INITIAL_SCALE if auto else float(config.loss_scaling),
        auto_loss_scale=auto,
        stochastic_rounding=config.stochastic_rounding and config.half_weights,
        half_partials=config.half_compute and config.partials == "half",
    )
