"""The numerics advice as it bears on one exported config.

The advice is per study; a config may not follow it (FP32 compute, or a knob the user's
space fixed). Each note states the config's own value, then the advice's reason only when
the config follows it, so the snippet's comments never contradict its code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..problem import Config

if TYPE_CHECKING:
    from ..numerics.answer import NumericsAdvice


def numerics_notes(advice: NumericsAdvice | None, config: Config) -> list[str]:
    if advice is None:
        return []
    if not config.half_compute:
        return [
            "Numerics: FP32 compute, so the FP16 advice (loss scale, partials, rounding) does "
            "not apply."
        ]
    ls, sr, pa = advice.loss_scale, advice.stochastic_rounding, advice.partials
    advised_scale = "auto" if ls.auto and config.half_weights else float(ls.scale)
    lines = ["Numerics, from the model's own gradients:"]
    scale = "automatic" if config.loss_scaling == "auto" else f"{config.loss_scaling:g}"
    lines.append(_line(f"loss scaling {scale}", config.loss_scaling == advised_scale, ls.reason))
    lines.append(_line(f"partials {config.partials}", config.partials == pa.recommend, pa.reason))
    if config.half_weights:
        rounding = "on" if config.stochastic_rounding else "off"
        lines.append(
            _line(
                f"stochastic rounding {rounding}",
                config.stochastic_rounding == sr.recommend,
                sr.reason,
            )
        )
    return lines


def _line(what: str, follows: bool, reason: str) -> str:
    return (
        f"{what}: {reason}" if follows else f"{what}: set by the search space, not by the advice"
    )
