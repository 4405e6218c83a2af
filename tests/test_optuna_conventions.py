"""Must show (issue 13, item 2): a finished study read with plain Optuna and with
optuna-dashboard's own code agrees with ipu-autotune: one constraint per trial, a best
that fits, readable parameter names, the complete Config in one user attribute."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import optuna
import optuna_dashboard  # the test extra: optuna-dashboard from the package index
import pytest
from optuna.trial import TrialState
from testing import STUDY, TUNE, finished_study, not_none

from ipu_autotune.cli import main
from ipu_autotune.problem import Config
from ipu_autotune.study.records import (
    ATTR_PROBLEM,
    ATTR_RECORD,
    ATTR_VERSION,
    records,
    trial_attrs,
)

pytestmark = pytest.mark.slow
#: what parameter names looked like before: internal keys, no longer written
INTERNAL = re.compile(r"^split\d+_of_\d+$|_pipelined$|_fp32_weights$|_ipu\d+$")


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Any:
    url, _ = finished_study(tmp_path_factory.mktemp("conventions"))
    return url, optuna.load_study(study_name=STUDY, storage=url)


def test_plain_optuna_sees_one_constraint_per_trial_and_a_best_that_fits(study: Any) -> None:
    _, s = study
    done = s.get_trials(states=(TrialState.COMPLETE,))
    assert all(len(t.constraints) == 1 for t in done)
    ours = {r.number: r for r in records(s)}
    for t in done:
        (violation,) = t.constraints.values()
        assert (violation <= 0) == ours[t.number].measurement.feasible
    assert any(next(iter(t.constraints.values())) > 0 for t in done), (
        "expected an out-of-memory trial"
    )
    best = s.best_trial
    assert next(iter(best.constraints.values())) <= 0 and ours[best.number].feasible
    assert best.value == max(
        not_none(ours[t.number].measurement.throughput) for t in done if ours[t.number].feasible
    )
    # The best by value alone (what tools without constraint support pick) is the same trial.
    assert max(done, key=lambda t: t.value).value == best.value


def test_best_params_are_readable_and_the_config_is_complete(study: Any) -> None:
    _, s = study
    assert s.best_params and not [p for p in s.best_params if INTERNAL.search(p)], s.best_params
    assert all(not INTERNAL.search(p) for t in s.trials for p in t.params)
    rec = s.best_trial.user_attrs[ATTR_RECORD]
    config = Config.from_dict(rec["config"], "best")
    assert config.to_dict() == rec["config"] and set(rec) >= {
        "config",
        "measurement",
        "origin",
        "seconds",
    }
    for knob in ("precision", "gradient_accumulation", "device_iterations"):
        assert s.best_params.get(knob, rec["config"][knob]) == rec["config"][knob]


def test_trials_dataframe_has_readable_columns(study: Any) -> None:
    _, s = study
    df = s.trials_dataframe()
    assert {"value", "params_precision", "user_attrs_record", "state"} <= set(df.columns)
    assert not [
        c for c in df.columns if c.startswith("params_") and INTERNAL.search(c[len("params_") :])
    ]


def _dashboard_get(app: Any, path: str) -> dict[str, Any]:
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO=path, REQUEST_METHOD="GET", QUERY_STRING="")
    status: list[str] = []

    def start_response(s: str, h: object, exc_info: object = None) -> Callable[[bytes], int]:
        status.append(s)
        return io.BytesIO().write

    body = b"".join(app(environ, start_response))
    assert status[0].startswith("200"), (status, body[:500])
    answer: dict[str, Any] = json.loads(body)
    return answer


def test_optuna_dashboard_shows_each_constraint_and_a_best_that_fits(study: Any) -> None:
    """optuna-dashboard's own WSGI app and serializer, asked what its web page asks."""
    url, s = study
    app = optuna_dashboard.wsgi(optuna.storages.RDBStorage(url))
    detail = _dashboard_get(app, f"/api/studies/{s._study_id}")
    ours = {r.number: r for r in records(s)}
    shown = {t["number"]: t for t in detail["trials"]}
    for number, r in ours.items():
        if r.state != "COMPLETE":
            continue
        (constraint,) = shown[number]["constraints"]  # exactly one, where the dashboard looks
        assert (constraint <= 0) == r.measurement.feasible
    (best,) = detail["best_trials"]
    assert best["number"] == s.best_trial.number and ours[best["number"]].feasible
    assert best["constraints"][0] <= 0
    assert not [p["name"] for p in best["params"] if INTERNAL.search(p["name"])]
    attrs = {a["key"] for a in best["user_attrs"]}
    assert ATTR_RECORD in attrs


def test_an_old_study_with_internal_names_is_refused_on_resume_and_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    main([*TUNE, "--trials", "2", "--storage", url, "--out", str(tmp_path / "o")])
    s = optuna.load_study(study_name=STUDY, storage=url)
    first = s.trials[0]
    old = dict(first.params)
    old["recompute_pipelined"] = "default"  # what studies written before the rename held
    dists = {
        **first.distributions,
        "recompute_pipelined": optuna.distributions.CategoricalDistribution(["default", "none"]),
    }
    config, m = trial_attrs(first)["config"], trial_attrs(first)["measurement"]
    s.add_trial(
        optuna.trial.create_trial(  # the old layout: one user attribute per field
            params=old,
            distributions=dists,
            value=1.0,
            system_attrs={"constraints": [-0.1]},
            user_attrs={"config": config, "measurement": m, "origin": "sampled", "seconds": 0.1},
        )
    )
    capsys.readouterr()
    assert main([*TUNE, "--trials", "1", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "recompute_pipelined" in err and "new --study" in err
    assert main(["show", "--study", STUDY, "--storage", url]) == 0
    assert (
        main(["report", "--study", STUDY, "--storage", url, "-o", str(tmp_path / "r.html")]) == 0
    )
    finished = s.get_trials(states=(TrialState.COMPLETE, TrialState.FAIL))
    assert len(records(s)) == len(finished) == 3  # the old-layout trial read too
    assert s.user_attrs[ATTR_PROBLEM] and s.user_attrs[ATTR_VERSION]
