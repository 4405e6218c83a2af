"""What the study is asked to try next, and why: the one object the runner, the trial line
and the stored record read of a guide's decision (no side attributes, no text parsed back)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from ..problem import Config


class Reason(Enum):
    """Why the guide chose a configuration. The value is the trial line's label."""

    FIRST_ROUND = "round"  # before any compile returned: what it adds to the round's expected best
    FIRST_FIT = "fit"  # nothing fits yet: the largest expected throughput (chance to fit x speed)
    GAIN = "gain"  # the largest expected gain on the best measured
    PRIOR = "prior"  # a calibration store's prior: the study's first compile


@dataclass(frozen=True)
class Proposal:
    """A configuration to enqueue. `origin` is its story as stored and shown in full;
    a guide's proposal also says why it was chosen (`reason`), its chance to fit and its
    expected gain on the best measured (a fraction; None where nothing was measured)."""

    config: Config
    origin: str
    reason: Reason | None = None
    chance: float | None = None
    gain: float | None = None

    @classmethod
    def guided(
        cls,
        config: Config,
        reason: Reason,
        chance: float | None,
        gain: float | None = None,
        why: str = "",
    ) -> Proposal:
        words = [f"{chance:.0%} chance to fit"] if chance is not None else []
        words += [f"expected gain {gain:.1%}"] if gain is not None else []
        words += [why] if why else []
        origin = f"guided ({', '.join(words)})" if words else "guided"
        return cls(config, origin, reason, chance, gain)

    def attrs(self) -> dict[str, Any]:
        """What the stored record keeps of the guide's decision (study/records.enqueue)."""
        if self.reason is None:
            return {}
        return {
            "reason": self.reason.value,
            "chance_to_fit": self.chance,
            "expected_gain": self.gain,
        }


@dataclass(frozen=True)
class History:
    """What a guide is told before each proposal. `measured`: (config, Measurement) of the
    finished trials, in order; `asked`: every config asked so far (finished, running or
    enqueued); `running`: how many trials other workers are compiling now; `would_compile`:
    whether the backend would compile a config (Backend.would_compile): one it would not
    counts as asked (guide/untried.py)."""

    measured: Sequence[Any] = ()
    asked: frozenset[Config] | set[Config] = field(default_factory=frozenset)
    running: int = 0
    would_compile: Callable[[Config], bool] | None = None

    @classmethod
    def of(
        cls,
        measured: Sequence[Any],
        asked: Iterable[Config] | None = None,
        running: int = 0,
        would_compile: Callable[[Config], bool] | None = None,
    ) -> History:
        """`asked` defaults to the measured configs."""
        return cls(
            list(measured),
            set(asked) if asked is not None else {c for c, _ in measured},
            running,
            would_compile,
        )


class Proposer(Protocol):
    """What a study's runner needs of a guide (guide/guide.Guide is one): the next
    configuration to compile and why, and whether more compiles are likely to pay. The
    runner depends on this, not on how a guide models the IPU."""

    def propose(self, history: History) -> Proposal | None:
        """The next configuration to compile and why, or None to let the sampler choose."""
        ...

    def stopping(self, history: History) -> object | None:
        """The stopping rule's finding (printable) once more compiles are unlikely to pay, else
        None."""
        ...
