"""What the knob table reads of a Problem and a Config, and the shapes of its functions.

Plain values only: the knob modules (knob_spec.py, knob_conditions.py, knob_moves.py) read a
Problem and a Config by attribute, so they sit under `problem.py` (which parses with the
table): these protocols say only what they read (KnobProblem, KnobConfig), and not even a
type-only import reaches up.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any, Protocol, Self, TypeAlias, TypeVar


class KnobProblem(Protocol):
    """What the table reads of a Problem."""

    @property
    def model(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def optimizer(self) -> str: ...
    @property
    def trainer(self) -> str: ...
    @property
    def global_batch(self) -> int | None: ...
    @property
    def input_shape(self) -> tuple[int, ...]: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def token_inputs(self) -> bool: ...


class KnobConfig(Protocol):
    """What the table reads of a Config (an IPU layout is one too), and its `replace`."""

    @property
    def precision(self) -> str: ...
    @property
    def partials(self) -> str: ...
    @property
    def half_compute(self) -> bool: ...
    @property
    def loss_scaling(self) -> float | str: ...
    @property
    def recompute(self) -> str: ...
    @property
    def available_memory_proportion(self) -> tuple[float, ...]: ...
    @property
    def optimizer_offload(self) -> bool: ...
    @property
    def ipus_per_replica(self) -> int: ...
    @property
    def replicas(self) -> int: ...
    @property
    def embedding_serialization(self) -> int: ...
    @property
    def input_embedding_serialization(self) -> int: ...
    def replace(self, **changes: Any) -> Self: ...


#: a move returns configs of the type it was given
ConfigT = TypeVar("ConfigT", bound=KnobConfig)


class Moves(Protocol):
    """(problem, config, the space's values of the knob) -> configs one change away, each of
    the given config's own type."""

    def __call__(
        self, problem: KnobProblem, config: ConfigT, values: list[Any], /
    ) -> Iterable[ConfigT]: ...


#: (problem, IPU layout or None) -> whether the knob does anything
Applies: TypeAlias = Callable[[KnobProblem, KnobConfig | None], bool]
#: problem -> the values a knob can take there
Usable: TypeAlias = Callable[[KnobProblem], Collection[Any]]
