"""What the guide starts a study from when other studies' compiles are known: a prior for
the learnt memory parts and call-time factors (the calibration store fits it, from records
of other studies on the same target and SDK: calibration/prior.py).

Without one the guide starts from guide/memory_model.PRIORS (the estimate as it is) and
call_model's factors of 1. With one, those priors are replaced by what the other studies'
compiles say, with a spread wide enough for a new model to differ; the study's own
compiles then move the parts as before. The other studies' compiles are also rows of the
memory knob-effect model (`memory_rows`), so what a knob did to the tiles of this IPU
elsewhere carries to this study as far as the studies agree. A Screen carries it
(`Screen.prior`), so every CorrectedModel the guide builds on that screen starts from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..problem import Config


@dataclass(frozen=True)
class KnobRow:
    """One IPU of another study's compile as the memory knob-effect model reads it
    (guide/knob_effects.py): its config, where its splits sit in its own model (fractions of
    its ops: features.split_fractions), its study, the IPU's place, and how much of a tile
    that study's own learnt memory parts left unexplained there."""

    config: Config
    split_at: tuple[float, ...]
    study: str
    level: int
    residual: float


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
    #: other studies' compiles, each IPU's busiest tile, as rows of the memory knob-effect
    #: model (their correlation with this study's is learnt there: guide/knob_effects.py)
    memory_rows: tuple[KnobRow, ...] = ()
    #: other studies' timed compiles, each one's log(measured / corrected) throughput with the
    #: call factors its study's other layouts give (trust.held_out_errors): their scale is where
    #: a new study's misfit starts (guide/trust.py)
    speed_errors: tuple[float, ...] = ()
