"""A TPE sampler whose cost stops growing: it models only a window of the study.

Optuna's TPE rebuilds its Parzen estimators from every finished trial at each ask, and with
constant liar (parallel workers) it reads every trial from the storage again, uncached
(optuna/samplers/_tpe/sampler.py, `TPESampler._sample`: `use_cache = not
self._constant_liar`). Both grow with the study: at 1,000 trials that is most of the
tuner's own time. Here the sampler sees the most recent `window` finished trials plus the
`keep_best` best feasible ones (so the "good" side of TPE never forgets the best region),
every trial comes from the study's read of the storage at the start of this ask (Optuna
resets that cache at each ask), RUNNING ones (the constant liar's lies) included. Below
`window` finished trials it is exactly TPESampler. The window stands in for the study in
TPE's public `sample_relative` and `sample_independent`, which hand it on to `_sample`.

Four more costs are paid once per ask rather than once per group of knobs (`group=True`
samples each group on its own, about 7 here): the window is built once per trial; the best
trials before it are kept between asks (`_BestBefore`: a finished trial never changes, so
each is judged once as it leaves the window); the grouped search space (Optuna's
`_GroupDecomposedSearchSpace.calculate` walks every finished trial at every ask) is
`KnobGroups`, the same decomposition, which only adds the trials it has not seen (its groups
are kept between asks and adding a trial's distributions again changes nothing, so skipping
seen trials gives the same groups; TPE finds it where it keeps its own, optuna_private.py);
and TPE's split of the trials into good and bad, which every group makes from the same
trials, is made once (`_WindowedStudy.split_trials`, reached through optuna_private.py).
The same seed proposes the same: tests/test_window_speed_same_proposals.py.

The window holds at least `window` finished trials, so it changes no startup decision while
`window` is at least TPE's `n_startup_trials`.

Optuna's own sampler suites run against it in tests/test_optuna_conformance_sampler.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Container, Sequence
from typing import Any, cast

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from ..optuna_private import (
    replace_group_decomposition,
    split_trials_through_study,
    study_trials,
)

#: finished trials TPE models at most (recent ones); the best are kept on top of these
DEFAULT_WINDOW = 200
DEFAULT_KEEP_BEST = 20
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def _feasible(t: FrozenTrial) -> bool:
    constraints = t.system_attrs.get("constraints")
    return (
        t.state == TrialState.COMPLETE
        and t.value is not None
        and (constraints is None or all(c <= 0 for c in constraints))
    )


def windowed(finished: list[FrozenTrial], window: int, keep_best: int) -> list[FrozenTrial]:
    """What the sampler models of the `finished` trials: the most recent `window`, and the
    `keep_best` best feasible ones before them, in trial order."""
    if len(finished) <= window:
        return finished
    recent = finished[-window:]
    best = sorted(
        (t for t in finished[:-window] if _feasible(t)),
        key=lambda t: cast(float, t.value),
        reverse=True,
    )[:keep_best]  # feasible: a value
    return sorted(best + recent, key=lambda t: t.number)


class _BestBefore:
    """`windowed` kept up between asks: the `keep_best` best feasible trials among those before
    the window. That part of the study only grows (the window is the `window` highest-numbered
    finished trials), and a finished trial never changes, so each is judged once as it leaves
    the window, not every finished trial at every ask."""

    def __init__(self, window: int, keep_best: int):
        self.window, self.keep_best = window, keep_best
        self._study: object = None
        self._seen: set[int] = set()  # numbers of the trials before the window judged so far
        self._best: list[FrozenTrial] = []  # the best of them: highest value first, then number

    def __call__(self, study: object, finished: list[FrozenTrial]) -> list[FrozenTrial]:
        if len(finished) <= self.window:
            return finished
        before, recent = finished[: -self.window], finished[-self.window :]
        new = len(before) - len(self._seen)
        if study is not self._study or new < 0:  # another study (or another handle on one)
            self._study, self._seen, self._best, new = study, set(), [], len(before)
        # usually the newcomers are the last ones; a trial that finished out of order (another
        # worker's) may sit anywhere, and then every trial before the window is looked at
        tail = before[-new:] if new > 0 else []
        if new > 0 and not any(t.number in self._seen for t in tail):
            self._add(tail)
        elif new != 0:
            self._add([t for t in before if t.number not in self._seen])
        return sorted(self._best + recent, key=lambda t: t.number)

    def _add(self, trials: list[FrozenTrial]) -> None:
        self._seen.update(t.number for t in trials)
        feasible = [t for t in trials if _feasible(t)]
        if feasible:  # as windowed's stable sort ranks them: by value, ties to the lower number
            ranked = sorted(self._best + feasible, key=lambda t: (-cast(float, t.value), t.number))
            self._best = ranked[: self.keep_best]


class _WindowedStudy:
    """The study as TPE sees it during one ask (its sampling methods): a bounded slice of its
    trials, built once, the RUNNING trials read once, and TPE's split of them made once."""

    def __init__(self, study: optuna.Study, best_before: _BestBefore):
        self._study = study
        finished = study_trials(study, _FINISHED, use_cache=True)
        self._finished = best_before(study, finished)
        self._running: list[FrozenTrial] | None = None
        self._split: tuple[tuple[int, ...], tuple[list[FrozenTrial], list[FrozenTrial]]] | None
        self._split = None

    def split_trials(
        self,
        trials: list[FrozenTrial],
        n_below: int,
        split: Callable[
            [Any, list[FrozenTrial], int], tuple[list[FrozenTrial], list[FrozenTrial]]
        ],
    ) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
        """TPE's split of `trials` into good and bad (`split`, Optuna's), made once for this
        ask: every group of knobs hands it the same trials (this window's, the same objects)
        and the same `n_below`, and the split depends on nothing else."""
        key = (n_below, *map(id, trials))  # the window holds them: no id is reused meanwhile
        if self._split is None or self._split[0] != key:
            self._split = (key, split(self, trials, n_below))
        below, above = self._split[1]
        return list(below), list(above)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        states = states if states is not None else tuple(TrialState)
        out = [t for t in self._finished if t.state in states]
        if TrialState.RUNNING in states:
            if self._running is None:  # this ask's read of the storage: as fresh as the ask
                self._running = study_trials(self._study, (TrialState.RUNNING,), use_cache=True)
            out += self._running
        return out


class KnobGroups:
    """The parameters split into groups that were always sampled together, as Optuna's
    `_SearchSpaceGroup` splits them (optuna/search_space/group_decomposed.py), in the same
    order: TPE samples each group jointly."""

    def __init__(self) -> None:
        self.search_spaces: list[dict[str, BaseDistribution]] = []

    def add_distributions(self, distributions: dict[str, BaseDistribution]) -> None:
        """Split each group into what this trial shares with it and the rest; its new names
        form a group of their own, last."""
        new = set(distributions)
        split: list[dict[str, BaseDistribution]] = []
        for group in self.search_spaces:
            names = set(group)
            split.append({name: group[name] for name in names & new})
            split.append({name: group[name] for name in names - new})
            new -= names
        split.append({name: distributions[name] for name in new})
        self.search_spaces = [group for group in split if group]


class _IncrementalGroups:
    """What TPE asks of its grouped search space (`calculate`), adding each finished trial once
    (module docstring)."""

    def __init__(self, include_pruned: bool):
        self._states = (
            (TrialState.COMPLETE, TrialState.PRUNED) if include_pruned else (TrialState.COMPLETE,)
        )
        self._groups = KnobGroups()
        self._added: set[int] = set()

    def calculate(self, study: optuna.Study, use_cache: bool = False) -> KnobGroups:
        trials = study_trials(study, self._states, use_cache=use_cache)
        if len(trials) != len(self._added):  # these states are final: no new trial, none to add
            for trial in trials:
                if trial.number not in self._added:  # finished: its distributions never change
                    self._groups.add_distributions(trial.distributions)
                    self._added.add(trial.number)
        return copy.deepcopy(self._groups)


class WindowedTPESampler(optuna.samplers.TPESampler):
    """TPESampler over a window of the study (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        window: int = DEFAULT_WINDOW,
        keep_best: int = DEFAULT_KEEP_BEST,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.window, self.keep_best = window, keep_best
        self._best_before = _BestBefore(window, keep_best)
        replace_group_decomposition(self, _IncrementalGroups(include_pruned=True))
        split_trials_through_study()  # the window's split: once per ask, not once per group
        self._asked: tuple[int, _WindowedStudy] | None = None  # (trial number, its window)

    def _windowed(self, study: optuna.Study, trial: FrozenTrial) -> _WindowedStudy:
        if (
            self._asked is None
            or self._asked[0] != trial.number
            or self._asked[1]._study is not study
        ):
            self._asked = (trial.number, _WindowedStudy(study, self._best_before))
        return self._asked[1]

    # The window stands in for the study: TPE reads only its trials (and passes the rest on).
    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return super().sample_relative(
            cast(optuna.Study, self._windowed(study, trial)), trial, search_space
        )

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        windowed = cast(optuna.Study, self._windowed(study, trial))
        return super().sample_independent(windowed, trial, param_name, param_distribution)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._asked = None  # the next ask sees this trial finished
        super().after_trial(study, trial, state, values)
