"""The windowed sampler's per-ask shortcuts (search/window.py: the best trials before the window
kept between asks, the grouped space not walked when nothing finished, TPE's good/bad split made
once per ask) change its cost, not what it proposes: the same seed gives the same parameters as
the window recomputed from every finished trial at every ask (`windowed`, the definition), split
once per group of knobs as Optuna does. The same holds on the SQLite storage the tuner writes
(study/deferred_writes.py: a finished trial read back from what its last batch wrote)."""

from __future__ import annotations

import random
import warnings
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from ipu_autotune.search import window
from ipu_autotune.search.window import WindowedTPESampler, windowed

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _finished(number: int, value: float, feasible: bool) -> Any:
    t = create_trial(
        params={"x": 0.5},
        distributions={"x": FloatDistribution(0, 1)},
        value=value,
        system_attrs={"constraints": [-1.0 if feasible else 1.0]},
    )
    t.number = number
    return t


def test_the_best_before_the_window_kept_between_asks_equals_windowed_at_every_ask() -> None:
    rng = random.Random(3)
    # values with ties (the lower number wins, as windowed's stable sort), some infeasible,
    # and trials that finish out of order (another worker's), so a newcomer is not always last
    trials = [_finished(i, float(rng.randint(0, 30)), rng.random() < 0.7) for i in range(300)]
    order = list(range(300))
    for i in range(0, 300, 7):
        j = min(299, i + rng.randint(1, 40))
        order[i], order[j] = order[j], order[i]
    kept = window._BestBefore(window=25, keep_best=4)
    study = object()
    done: list[FrozenTrial] = []
    for number in order:
        done.append(trials[number])
        finished = sorted(done, key=lambda t: t.number)
        assert [t.number for t in kept(study, finished)] == [
            t.number for t in windowed(finished, 25, 4)
        ]
    other = [_finished(i, 1.0, True) for i in range(40)]  # another study: starts over
    assert [t.number for t in kept(object(), other)] == [t.number for t in windowed(other, 25, 4)]


def _run(seed: int, trials: int, storage: Any = None) -> list[dict[str, Any]]:
    """An ask/tell study as the Runner drives it: grouped conditional knobs, the constraint
    written as the Runner writes it, tied and infeasible values."""
    sampler = WindowedTPESampler(
        seed=seed,
        multivariate=True,
        group=True,
        constant_liar=True,
        n_startup_trials=5,
        window=12,
        keep_best=3,
    )
    study = optuna.create_study(direction="maximize", sampler=sampler, storage=storage)
    asked = []
    for _ in range(trials):
        trial = study.ask()
        kind = trial.suggest_categorical("kind", ["a", "b"])
        x = trial.suggest_float("x", 0.0, 1.0)
        y = (
            trial.suggest_int("y", 1, 8)
            if kind == "a"
            else trial.suggest_float("z", 0.1, 0.9, step=0.1)
        )
        over = x - 0.8  # > 0: does not fit
        study._storage.set_trial_system_attr(trial._trial_id, "constraints", [over])
        if kind == "b" and x > 0.95:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, round(x * y, 1) if over <= 0 else 0.0)
        asked.append(dict(trial.params))
    return asked


def test_the_same_seed_proposes_the_same_as_the_window_recomputed_at_every_ask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipped = _run(seed=7, trials=70)

    def recomputed(
        self: Any, study: Any, finished: Any
    ) -> Any:  # the definition, from every finished trial, each ask
        return windowed(finished, self.window, self.keep_best)

    monkeypatch.setattr(window._BestBefore, "__call__", recomputed)
    monkeypatch.setattr(window._IncrementalGroups, "calculate", _walk_every_trial)
    monkeypatch.setattr(window._WindowedStudy, "split_trials", _split_every_group)
    assert _run(seed=7, trials=70) == shipped
    assert _run(seed=8, trials=70) != shipped  # the comparison can fail: another seed differs


def _split_every_group(self: Any, trials: Any, n_below: int, split: Any) -> Any:
    """_WindowedStudy.split_trials without keeping the split for the ask: Optuna's, each time."""
    return split(self, trials, n_below)


def test_the_sqlite_storage_proposes_the_same_as_memory(tmp_path: Any) -> None:
    from ipu_autotune.study.storage import open_storage

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "heartbeat is meant for optimize()": the Runner beats
        on_disk = _run(seed=7, trials=70, storage=open_storage(f"sqlite:///{tmp_path}/s.db"))
    assert on_disk == _run(seed=7, trials=70)


def _walk_every_trial(self: Any, study: Any, use_cache: bool = False) -> Any:
    """_IncrementalGroups.calculate without the skip when nothing finished."""
    import copy

    from ipu_autotune.optuna_private import study_trials

    for trial in study_trials(study, self._states, use_cache=use_cache):
        if trial.number not in self._added:
            self._groups.add_distributions(trial.distributions)
            self._added.add(trial.number)
    return copy.deepcopy(self._groups)
