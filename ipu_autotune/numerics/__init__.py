"""FP16 numerics advice from the model's own gradients: loss scale, stochastic rounding, partials.

A few FP32 training steps on the CPU, with the model's real initialisation, give histograms of
gradient and weight magnitudes over powers of two. From them:

* loss scale: the largest power of two that keeps the largest gradient 16x below FP16's
  maximum (65504), and how many non-zero gradients scale 1 would flush to zero;
* stochastic rounding: the share of weight updates smaller than half an FP16 ulp of their
  weight, which round-to-nearest drops (the weight never moves);
* partials: matmuls/convolutions whose partial sums could leave FP16's range or swamp.

One module per concern: `statistics` (the histograms; `optimizers`, `running` and `data`
serve it), `loss_scale`, `stochastic_rounding`, `partials`, and `advice` (the three together,
`advise` and `NumericsAdvice.apply`). They decide; `view` formats. Nothing here reads
command-line arguments (that is `commands/numerics.py`). Only torch is used (no numpy).
"""

from .advice import PARTIALS_BATCH_CAP, NumericsAdvice, advise, summary_lines
from .data import STATS_BATCH_CAP, load_data, synthetic_batches
from .fp16 import (
    FP16_MANTISSA_BITS,
    FP16_MAX,
    FP16_MIN_EXP,
    FP16_NORMAL_EXP,
    format_percent,
    format_scale,
)
from .loss_scale import (
    DRIFT_BINADES,
    LOSS_SCALE_MARGIN,
    SCALE_EXPONENTS,
    UNDERFLOW_TOLERANCE,
    LossScaleAdvice,
    LossScaleRow,
    loss_scale_table,
    recommend_loss_scale,
)
from .optimizers import default_lr
from .partials import (
    PARTIALS_RANGE_LIMIT,
    PARTIALS_SWAMP_TOLERANCE,
    LayerPartials,
    PartialsAdvice,
    partials_advice,
)
from .statistics import GradientStats, collect_gradient_stats
from .stochastic_rounding import (
    SR_THRESHOLD,
    StochasticRoundingAdvice,
    lost_update_fraction,
    stochastic_rounding_advice,
)

__all__ = [
    "DRIFT_BINADES", "FP16_MANTISSA_BITS", "FP16_MAX", "FP16_MIN_EXP", "FP16_NORMAL_EXP", "LOSS_SCALE_MARGIN",
    "PARTIALS_BATCH_CAP", "PARTIALS_RANGE_LIMIT", "PARTIALS_SWAMP_TOLERANCE", "SCALE_EXPONENTS", "SR_THRESHOLD",
    "STATS_BATCH_CAP", "UNDERFLOW_TOLERANCE",
    "GradientStats", "LayerPartials", "LossScaleAdvice", "LossScaleRow", "NumericsAdvice", "PartialsAdvice",
    "StochasticRoundingAdvice",
    "advise", "collect_gradient_stats", "default_lr", "format_percent", "format_scale", "load_data",
    "loss_scale_table", "lost_update_fraction", "partials_advice", "recommend_loss_scale",
    "stochastic_rounding_advice", "summary_lines", "synthetic_batches",
]
