"""What the guide starts a study from when other studies' compiles are known: a prior for
the learnt memory parts and call-time factors (the calibration store fits it, from records
of other studies on the same target and SDK: calibration/prior.py).

Without one the guide starts from guide/memory_model.PRIORS (the estimate as it is) and
call_model's factors of 1. With one, those priors are replaced by what the other studies'
compiles say, with a spread wide enough for a new model to differ; the study's own
compiles then move the parts as before. A Screen carries it (`Screen.prior`), so every
CorrectedModel the guide builds on that screen starts from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GuidePrior:
    #: memory part name (MemoryModel.names: "fixed", "proportional", "per stage", ...,
    #: "category <c>") -> (mean, standard deviation), fractions of a tile
    memory: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: one IPU's busiest-tile noise around the parts (fraction of a tile), or None: NOISE_PRIOR
    noise: float | None = None
    #: (log device factor, log host factor, standard deviation of each), or None: (0, 0, PRIOR_SD)
    call: tuple[float, float, float] | None = None
    records: int = 0
    studies: int = 0
    label: str = ""  # e.g. "mk2, poptorch-3.4.0: 41 compiles of 3 other studies"
    #: how far a new model's memory departs from what the records predict, as a fraction of
    #: the default priors' spreads: the per-model parts a store cannot carry (each layout's
    #: fixed cost, corrected.LOCAL_MEMORY_SD) get this fraction of their default spread
    #: (calibration/prior.py fits it on the records, holding out one study at a time)
    memory_scale: float = 1.0
    #: the covariance of the `memory` parts (in that order; its diagonal the squared spreads),
    #: or None: independent parts
    memory_cov: tuple[tuple[float, ...], ...] | None = None
