"""A TPE sampler whose cost stops growing: it models only a window of the study.

Optuna's TPE rebuilds its Parzen estimators from every finished trial at each ask, and with
constant liar (parallel workers) it reads every trial from the storage again, uncached
(optuna/samplers/_tpe/sampler.py, `TPESampler._sample`: `use_cache = not
self._constant_liar`). Both grow with the study: at 1,000 trials that is most of the
tuner's own time. Here the sampler sees the most recent `window` finished trials plus the
`keep_best` best feasible ones (so the "good" side of TPE never forgets the best region),
finished trials come from the storage's cache and only RUNNING trials (the constant liar's
lies) are read fresh. Below `window` finished trials it is exactly TPESampler.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

#: finished trials TPE models at most (recent ones); the best are kept on top of these
DEFAULT_WINDOW = 200
DEFAULT_KEEP_BEST = 20
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def _feasible(t: FrozenTrial) -> bool:
    constraints = t.system_attrs.get("constraints")
    return t.state == TrialState.COMPLETE and t.value is not None and (
        constraints is None or all(c <= 0 for c in constraints))


class _WindowedStudy:
    """The study as TPE's `_sample` sees it: a bounded slice of its trials."""

    def __init__(self, study: optuna.Study, window: int, keep_best: int):
        self._study, self._window, self._keep_best = study, window, keep_best

    def __getattr__(self, name):
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        states = tuple(states) if states is not None else tuple(TrialState)
        finished = [t for t in self._study._get_trials(deepcopy=False, states=_FINISHED, use_cache=True)
                    if t.state in states]
        if len(finished) > self._window:
            recent = finished[-self._window:]
            best = sorted((t for t in finished[:-self._window] if _feasible(t)),
                          key=lambda t: t.value, reverse=True)[:self._keep_best]
            finished = sorted(best + recent, key=lambda t: t.number)
        if TrialState.RUNNING in states:
            finished += self._study._storage.get_all_trials(self._study._study_id, deepcopy=False,
                                                            states=(TrialState.RUNNING,))
        return finished


class WindowedTPESampler(optuna.samplers.TPESampler):
    """TPESampler over a window of the study (see the module docstring)."""

    def __init__(self, *args, window: int = DEFAULT_WINDOW, keep_best: int = DEFAULT_KEEP_BEST, **kwargs):
        super().__init__(*args, **kwargs)
        self.window, self.keep_best = window, keep_best

    def _sample(self, study, trial: FrozenTrial, search_space: dict) -> dict:
        return super()._sample(_WindowedStudy(study, self.window, self.keep_best), trial, search_space)


def trial_window(trials: Sequence[FrozenTrial], window: int, keep_best: int) -> list[FrozenTrial]:
    """What the sampler models of `trials` (for tests and the docs)."""
    class _Fake:
        _storage = None
        _study_id = 0

        def _get_trials(self, deepcopy=False, states=None, use_cache=True):
            return [t for t in trials if t.state in (states or tuple(TrialState))]

    return _WindowedStudy(_Fake(), window, keep_best)._get_trials(states=_FINISHED)
