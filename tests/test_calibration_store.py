"""The calibration store (issue 25, docs/calibration.md): records written once, kept apart by
target and SDK, forgotten only as named, a foreign store refused while the study runs on."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any, cast

import optuna
import pytest
from conftest_fake_sdk import SMALL_CNN
from testing import not_none

from ipu_autotune.backends.base import Backend
from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.calibration import session
from ipu_autotune.calibration.prior import fit_prior, loso
from ipu_autotune.calibration.recorder import Recorder
from ipu_autotune.calibration.refusal import StoreRefused
from ipu_autotune.calibration.store import Store, default_url, open_store
from ipu_autotune.cli import main
from ipu_autotune.guide.corrected import CorrectedModel
from ipu_autotune.guide.first_trials import first_trials
from ipu_autotune.guide.warmstart import Screen, naive_baseline
from ipu_autotune.problem import Problem
from ipu_autotune.profiles.trace import profile_for
from ipu_autotune.search.space import SearchSpace
from ipu_autotune.study.records import TrialRecord

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = Problem(model=SMALL_CNN, batch_size=64, input_shape=(3, 32, 32), num_classes=10, ipus=2)


#: record_of builds a record without the store it would add it to
NO_STORE = cast(Store, None)


@cache
def _setup(target: str = "mk2") -> Any:
    problem = dataclasses.replace(PROBLEM, target=target)
    profile = profile_for(problem)
    space = SearchSpace.load(problem, None)
    base = naive_baseline(problem, profile)
    configs = [
        base,
        base.replace(precision="16.16"),
        base.replace(precision="16.16", optimizer_offload=True),
        base.replace(available_memory_proportion=(0.3,) * base.ipus_per_replica),
    ]
    return problem, profile, space, list(dict.fromkeys(configs))


class HiddenFactor(Backend):
    """A 'compiling' backend whose busiest tiles are the estimate's x `factor` (a test IPU)."""

    name, source = "hidden", "compile"

    def __init__(self, factor: float, sdk: str = "sdk-a") -> None:
        self.factor, self._sdk = factor, sdk

    @property
    def sdk(self) -> Any:
        return self._sdk

    def measure(self, problem: Any, config: Any) -> Any:
        m = EstimateBackend().measure(problem, config)
        tiles = [int(t * self.factor) for t in m.max_tile_bytes]
        return dataclasses.replace(
            m,
            source="compile",
            max_tile_bytes=tiles,
            details={"compile_seconds": 12.0},
            feasible=max(tiles) <= m.tile_capacity_bytes,
            failure=None,
        )


def records_of(
    study: str, target: str = "mk2", sdk: str = "sdk-a", factor: float = 1.3
) -> list[dict[str, Any]]:
    problem, profile, _, configs = _setup(target)
    backend = HiddenFactor(factor, sdk)
    rec = Recorder(NO_STORE, problem, profile, backend, study, f"uid-{study}")
    return [
        not_none(rec.record_of(i, c, backend.measure(problem, c))) for i, c in enumerate(configs)
    ]


def _url(tmp_path: Path, kind: str) -> str:
    return (
        f"sqlite:///{tmp_path}/cal.db"
        if kind == "sqlite"
        else f"journal:///{tmp_path}/cal.journal"
    )


KINDS = ("sqlite", "journal")

WRITER = """
import json, sys
from ipu_autotune.calibration.store import open_store
url, path = sys.argv[1], sys.argv[2]
store = open_store(url)
added = sum(store.add(r) for r in json.load(open(path)))
print(added)
"""


@pytest.mark.parametrize("kind", KINDS)
def test_two_workers_writing_the_same_compiles_store_each_once(tmp_path: Path, kind: Any) -> None:
    url = _url(tmp_path, kind)
    # both workers write every compile of two studies (as a resumed or racing worker would)
    records = records_of("s1") + records_of("s2")
    path = tmp_path / "records.json"
    path.write_text(json.dumps(records * 5))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    added = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-2000:]
        added.append(int(out.strip()))
    assert sum(added) == len(records)  # every compile added by exactly one of them
    stored, unreadable = open_store(url).records()
    assert unreadable == 0
    assert sorted(r["key"] for r in stored) == sorted(r["key"] for r in records)


def test_a_recorder_writes_compiles_and_never_estimates(tmp_path: Path) -> None:
    problem, profile, _, configs = _setup()
    store = open_store(_url(tmp_path, "sqlite"))

    @dataclasses.dataclass
    class Rec:
        number: int
        config: object
        measurement: object

    def as_trial(rec: Rec) -> TrialRecord:
        return cast(TrialRecord, rec)  # Recorder reads a trial's number, config and measurement

    compiling = HiddenFactor(1.2)
    recorder = Recorder(store, problem, profile, compiling, "s", "uid-s")
    m = compiling.measure(problem, configs[0])
    screened = dataclasses.replace(m, source="estimate", details={"screened": True})
    offline = dataclasses.replace(
        m, details={"throughput_source": "estimate", "sdk": "poptorch-9.9"}
    )
    for i, (c, mm) in enumerate([(configs[0], m), (configs[1], screened), (configs[2], offline)]):
        recorder(as_trial(Rec(i, c, mm)))
    recorder(as_trial(Rec(0, configs[0], m)))  # the same trial again: stored once
    estimating = Recorder(store, problem, profile, EstimateBackend(), "s", "uid-s")
    estimating(
        as_trial(Rec(7, configs[3], dataclasses.replace(m, source="compile")))
    )  # labelled estimate-*: never
    stored = {r["trial"]: r for r in store.records()[0]}
    assert sorted(stored) == [0, 2]
    assert (
        stored[0]["sdk"] == "sdk-a" and stored[2]["sdk"] == "poptorch-9.9"
    )  # the compile's own label wins
    assert stored[0]["measured"]["throughput"] == m.throughput
    assert (
        stored[2]["measured"]["throughput"] is None
    )  # the estimator's figure is not the hardware's
    assert stored[0]["measured"]["compile_seconds"] == 12.0
    assert (
        stored[0]["nominal"]["max_tile_bytes"]
        == EstimateBackend().measure(problem, configs[0]).max_tile_bytes
    )
    assert (
        stored[0]["profile"]["params"] == profile.params
        and len(stored[0]["profile"]["activations_by_stage"]) == 2
    )


class _Study:
    def __init__(self, name: Any, uid: Any) -> None:
        self.study_name, self.user_attrs = name, {session.ATTR_UID: uid}

    def as_study(self) -> optuna.Study:
        return cast(optuna.Study, self)  # prepare reads a study's name and user attributes


def _guided(store: Any, target: Any = "mk2", sdk: Any = "sdk-a", uid: Any = "uid-new") -> Any:
    from ipu_autotune.guide.guide import Guide, GuideSettings

    problem, profile, space, _ = _setup(target)
    cal = session.prepare(
        store,
        _Study("new", uid).as_study(),
        problem,
        profile,
        HiddenFactor(1.0, sdk),
        lambda s: None,
    )
    assert cal is not None  # a store is given
    return Guide(problem, profile, space, GuideSettings(0.05, prior=cal.prior)), cal


def test_a_store_from_another_target_or_sdk_is_not_applied(tmp_path: Path) -> None:
    store = open_store(_url(tmp_path, "sqlite"))
    for r in records_of("old", factor=1.3):
        store.add(r)
    problem, profile, space, configs = _setup()
    nominal = not_none(Screen(problem, profile, space=space)(configs[0])).max_tile_bytes
    cap = not_none(Screen(problem, profile, space=space)(configs[0])).tile_capacity_bytes

    same, cal = _guided(store)
    assert same.has_prior and "1 other study" in cal.note
    mean = not_none(CorrectedModel(same.screen, [], 0.05).judge(configs[0])).busiest
    assert mean == pytest.approx(
        1.3 * max(nominal) / cap, rel=0.03
    )  # the other study's x1.3, from trial 1

    for guide, _ in (
        _guided(store, sdk="sdk-b"),
        _guided(store, target="bow"),
        _guided(store, uid="uid-old"),
    ):
        assert not guide.has_prior  # another SDK, another target, or the study's own records
        untouched = not_none(CorrectedModel(guide.screen, [], 0.05).judge(configs[0])).busiest
        assert untouched == pytest.approx(max(nominal) / cap)


def test_the_corrected_estimate_beats_the_nominal_one_left_one_study_out() -> None:
    records = (
        records_of("a", factor=1.25) + records_of("b", factor=1.3) + records_of("c", factor=1.28)
    )
    e = not_none(loso(records))
    assert e["studies"] == 3 and e["memory_points"] == 2 * len(records)
    assert e["memory_corrected"] < 0.5 * e["memory_nominal"]
    prior = not_none(fit_prior(records))
    assert prior.memory["proportional"][0] == pytest.approx(1.28, abs=0.05)


def _cli(*args: Any) -> int:
    return main(["calibration", *args])


@pytest.mark.parametrize("kind", KINDS)
def test_forget_removes_only_what_it_names(
    tmp_path: Path, kind: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(tmp_path, kind)
    store = open_store(url)
    groups = {
        ("mk2", "sdk-a", "s1"): records_of("s1"),
        ("mk2", "sdk-b", "s2"): records_of("s2", sdk="sdk-b"),
        ("bow", "sdk-a", "s3"): records_of("s3", target="bow"),
    }
    for rs in groups.values():
        for r in rs:
            store.add(r)
    keys = {g: {r["key"] for r in rs} for g, rs in groups.items()}
    everything = set().union(*keys.values())

    def stored() -> Any:
        return {r["key"] for r in open_store(url).records()[0]}

    assert _cli("--calibration-storage", url, "--forget") == 2  # names nothing: removes nothing
    assert _cli("--calibration-storage", url, "--forget", "--sdk", "sdk-z") == 2
    assert _cli("--calibration-storage", url, "--forget", "--target", "mk7") == 2
    assert stored() == everything
    capsys.readouterr()
    assert _cli("--calibration-storage", url, "--forget", "--target", "mk2", "--sdk", "sdk-a") == 0
    assert f"forgot {len(keys['mk2', 'sdk-a', 's1'])} record(s)" in capsys.readouterr().out
    assert stored() == everything - keys["mk2", "sdk-a", "s1"]
    assert _cli("--calibration-storage", url, "--forget", "--study", "s3") == 0
    assert stored() == keys["mk2", "sdk-b", "s2"]
    assert _cli("--calibration-storage", url) == 0  # shows what is left


def _one_line_naming(exc: BaseException, name: str) -> None:
    text = str(exc)
    assert (
        "\n" not in text
        and name in text
        and ("move it aside" in text or "use the ipu-autotune" in text)
    )


def test_corrupted_or_foreign_stores_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x00not a database at all\xff" * 100)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("create table studies (id integer)")
    journal = tmp_path / "other.journal"
    journal.write_text('{"op_code": 0, "worker_id": "x"}\n')  # an Optuna journal, say
    newer = tmp_path / "newer.db"
    open_store(f"sqlite:///{newer}")
    with sqlite3.connect(newer) as db:
        db.execute("update ipu_autotune_calibration_meta set value = '99' where name = 'format'")
    for path, url in (
        (garbage, f"sqlite:///{garbage}"),
        (foreign, f"sqlite:///{foreign}"),
        (journal, f"journal:///{journal}"),
        (newer, f"sqlite:///{newer}"),
    ):
        before = path.read_bytes()
        with pytest.raises(StoreRefused) as caught:
            open_store(url)
        _one_line_naming(caught.value, path.name)
        assert path.read_bytes() == before  # nothing written to it
        capsys.readouterr()
        assert _cli("--calibration-storage", url) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and path.name in err


def test_the_default_store_sits_beside_the_study_storage() -> None:
    assert default_url("sqlite:///ipu-autotune.db") == "sqlite:///ipu-autotune-calibration.db"
    assert default_url("sqlite:////data/runs/x.db") == "sqlite:////data/runs/x-calibration.db"
    assert default_url("journal:///shared/s.journal") == "journal:///shared/s-calibration.journal"
    assert (
        default_url("postgresql://u@h/db") == "postgresql://u@h/db"
    )  # its own tables in that database
    assert default_url("memory:") is None


def test_the_guides_models_start_from_the_prior_and_move_with_their_own_compiles() -> None:
    import math

    from ipu_autotune.guide.call_model import CallModel, CallTime
    from ipu_autotune.guide.memory_model import MemoryModel
    from ipu_autotune.guide.memory_points import MemoryPoint
    from ipu_autotune.guide.prior import GuidePrior

    prior = GuidePrior({"proportional": (1.3, 0.02)}, None, (math.log(1.2), 0.0, 0.05))
    assert MemoryModel([]).tile((2, 1, "pipelined"), 0.5, (0.0,) * 7)[0] == pytest.approx(0.5)
    assert MemoryModel([], prior).tile((2, 1, "pipelined"), 0.5, (0.0,) * 7)[0] == pytest.approx(
        0.65
    )
    assert CallModel([], prior.call).device == pytest.approx(1.2)
    # its own compiles (measured = estimate x 1.0, many of them) pull the parts back from the prior
    own = [
        MemoryPoint((2, 1, "pipelined"), e, (0.0,) * 7, e) for e in (0.3, 0.4, 0.5, 0.6, 0.7) * 4
    ]
    moved = MemoryModel(own, prior).tile((2, 1, "pipelined"), 0.5, (0.0,) * 7)[0]
    assert 0.5 <= moved < 0.6
    calls = [CallTime(1.0, 0.1, True, 10.0, 1.0) for _ in range(6)]
    assert 1.0 <= CallModel(calls, prior.call).device < 1.1


def test_the_command_shows_the_store_as_json_with_its_leave_one_study_out_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(tmp_path, "journal")
    store = open_store(url)
    for study, factor in (("a", 1.25), ("b", 1.3)):
        for r in records_of(study, factor=factor):
            store.add(r)
    capsys.readouterr()
    assert _cli("--calibration-storage", url, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    (group,) = shown["groups"]
    assert (group["target"], group["sdk"], group["records"], group["studies"]) == (
        "mk2",
        "sdk-a",
        8,
        ["a", "b"],
    )
    e = group["leave_one_study_out"]
    assert e["memory_corrected"] < e["memory_nominal"]
    from ipu_autotune.calibration.prior import SCALES

    assert (
        group["correction"]["memory scale"] in SCALES
    )  # read from the two studies held out in turn
    assert (
        _cli("--calibration-storage", url, "--target", "bow") == 2
    )  # nothing there: one line, exit 2
    assert "mk2 sdk-a" in capsys.readouterr().err


def test_compile_time_is_fitted_on_the_ops_of_the_busiest_stage() -> None:
    from ipu_autotune.calibration.compile_time import fit_compile_time

    # seconds = 2 x ops^0.8 exactly: the fit finds it; without ops per stage nothing is fitted
    records = [
        {
            "measured": {"compile_seconds": 2.0 * ops**0.8},
            "profile": {"ops_by_stage": [ops, ops // 2]},
        }
        for ops in (100, 200, 400, 800, 1600)
    ]
    fit = not_none(fit_compile_time(records))
    assert fit.b == pytest.approx(0.8, abs=1e-6) and fit.seconds(3200) == pytest.approx(
        2.0 * 3200**0.8, rel=1e-6
    )
    assert fit_compile_time([{"measured": {"compile_seconds": 5.0}, "profile": {}}]) is None
    assert records_of("s")[0]["profile"]["ops_by_stage"]  # a real record has them


def test_a_baseline_the_prior_rules_out_is_not_compiled(tmp_path: Path) -> None:
    from ipu_autotune.backends.screen import ScreenedBackend

    problem, profile, space, configs = _setup()
    nominal = EstimateBackend().measure(problem, configs[0])
    factor = 1.5 / (
        max(nominal.max_tile_bytes) / nominal.tile_capacity_bytes
    )  # the other study: x this
    store = open_store(_url(tmp_path, "sqlite"))
    for r in records_of("old", factor=factor):
        store.add(r)
    guide, _ = _guided(store)

    def screened(baseline: Any) -> Any:
        return ScreenedBackend(
            HiddenFactor(factor),
            EstimateBackend(headroom=0.05),
            margin=float("inf"),
            veto=session.prior_veto(guide, baseline),
        )

    backend = screened(configs[0])  # configs[0] is the baseline here
    m = backend.measure(problem, configs[0])
    assert m.source == "estimate" and "calibration store" in m.reason and backend.compiles_run == 0
    assert (
        m.max_tile_bytes == nominal.max_tile_bytes
    )  # the record holds the nominal estimate, labelled as such
    assert not backend.would_compile(problem, configs[0])
    backend = screened(configs[1])  # another baseline: configs[0] is compiled
    assert backend.measure(problem, configs[0]).source == "compile" and backend.compiles_run == 1
    other, _ = _guided(store, sdk="sdk-b")
    assert session.prior_veto(other, configs[0]) is None  # no prior, no veto


def test_the_priors_spread_is_what_studies_held_out_show() -> None:
    """Studies that agree give a sharp prior, studies that differ a wide one: the spread is
    fitted leaving one study out (prior.memory_scale); one study has nothing to hold out."""
    from ipu_autotune.calibration.prior import BETWEEN, SCALES, memory_scale
    from ipu_autotune.guide.memory_model import MemoryModel

    assert memory_scale(records_of("a")) == (BETWEEN, 1.0)
    assert not_none(fit_prior(records_of("a"))).memory_scale == 1.0
    agree = not_none(fit_prior([r for s in "abc" for r in records_of(s, factor=1.3)]))
    differ = not_none(
        fit_prior(
            [
                r
                for s, f in zip("abc", (1.0, 1.3, 1.7), strict=True)
                for r in records_of(s, factor=f)
            ]
        )
    )
    assert agree.memory_scale == min(SCALES) and differ.memory_scale > 2 * agree.memory_scale
    problem, profile, space, configs = _setup()
    m = not_none(Screen(problem, profile, space=space)(configs[1]))
    lay = (configs[1].ipus_per_replica, configs[1].replicas, configs[1].execution)
    sharp = max(sd for _, sd in MemoryModel([], agree).busiest(lay, m))
    wide = max(sd for _, sd in MemoryModel([], differ).busiest(lay, m))
    assert sharp < 0.5 * wide


class SpeedFactor(HiddenFactor):
    """A test IPU that runs every config `speed` times as fast as the estimate says."""

    def __init__(self, speed: float) -> None:
        super().__init__(1.0)
        self.speed = speed

    def measure(self, problem: Any, config: Any) -> Any:
        m = super().measure(problem, config)
        return dataclasses.replace(m, throughput=m.throughput * self.speed)


def test_the_call_factors_spread_is_what_studies_held_out_show() -> None:
    """Studies whose models ran at the same speed against the estimate give the call factors
    a sharp prior; studies whose models differ by 3x a wide one (prior.call_scale); one study
    has nothing to hold out."""
    from ipu_autotune.calibration.prior import BETWEEN, SCALES, call_scale

    problem, profile, _, configs = _setup()

    def timed(speeds: Any) -> list[dict[str, Any]]:
        out = []
        for study, speed in zip("abc", speeds, strict=False):  # one to three studies
            backend = SpeedFactor(speed)
            rec = Recorder(NO_STORE, problem, profile, backend, study, f"uid-{study}")
            out += [
                not_none(rec.record_of(i, c, backend.measure(problem, c)))
                for i, c in enumerate(configs)
            ]
        return out

    assert call_scale(timed([0.8])) == BETWEEN
    agree, differ = call_scale(timed([0.8, 0.8, 0.8])), call_scale(timed([0.5, 1.0, 1.6]))
    assert agree == min(SCALES) and differ >= 0.7
    assert (
        not_none(not_none(fit_prior(timed([0.5, 1.0, 1.6]))).call)[2]
        > 2 * not_none(not_none(fit_prior(timed([0.8, 0.8, 0.8]))).call)[2]
    )


class SpeedRegion(SpeedFactor):
    """A test IPU that runs the FP16 configs `speed` times as fast as the estimate says, the
    rest as estimated (a region of the space the estimator is off in)."""

    def measure(self, problem: Any, config: Any) -> Any:
        m = HiddenFactor.measure(self, problem, config)
        if config.precision != "16.16":
            return m
        return dataclasses.replace(m, throughput=m.throughput * self.speed)


def test_the_prior_carries_how_far_this_ipu_ran_from_the_corrected_estimate() -> None:
    """Each timed compile of the store gives its error against the estimate corrected by the
    call factors its study's compiles in other layouts give, for a new study's misfit
    (guide/trust.py): an IPU that is 2x the estimate everywhere is what the factors learn (no
    error left); one that is 2x on FP16 leaves errors of about that size. An out-of-memory
    compile has no speed to give."""
    problem, profile, _, configs = _setup()
    base = configs[0]
    configs = [  # two more layouts: the factors learnt in the others are tested in each
        *configs,
        base.replace(execution="sharded"),
        base.replace(execution="sharded", precision="16.16"),
        base.replace(
            ipus_per_replica=1,
            replicas=2,
            splits=(),
            available_memory_proportion=(0.6,),
            gradient_accumulation=1,
        ),
    ]

    def errors(backend: Any) -> tuple[float, ...]:
        rec = Recorder(NO_STORE, problem, profile, backend, "a", "uid-a")
        records = [
            not_none(rec.record_of(i, c, backend.measure(problem, c)))
            for i, c in enumerate(configs)
        ]
        timed = [r for r in records if r["measured"].get("throughput")]
        found = not_none(fit_prior(records)).speed_errors
        assert timed and len(found) == len(timed)
        return found

    assert max(abs(e) for e in errors(SpeedFactor(2.0))) < 0.1
    assert max(abs(e) for e in errors(SpeedRegion(2.0))) > 0.3


def test_the_prior_keeps_how_its_parts_move_together() -> None:
    """The store's fit moves the proportional part and the per-category deviations together:
    carried as a covariance, a recorded model's tiles are as certain as its records say;
    their spreads alone would make them several times less so."""
    from ipu_autotune.guide.memory_model import MemoryModel

    prior = not_none(fit_prior([r for s in "abc" for r in records_of(s, factor=1.3)]))
    assert prior.memory_cov is not None and len(prior.memory_cov) == len(prior.memory)
    problem, profile, space, configs = _setup()
    m = not_none(Screen(problem, profile, space=space)(configs[2]))
    lay = (configs[2].ipus_per_replica, configs[2].replicas, configs[2].execution)
    together = MemoryModel([], prior).busiest(lay, m)
    apart = MemoryModel([], dataclasses.replace(prior, memory_cov=None)).busiest(lay, m)
    for (mu, sd), (mu_apart, sd_apart) in zip(together, apart, strict=True):
        assert mu == pytest.approx(mu_apart, abs=1e-6)  # the same means
        assert sd < sd_apart
    tiles = HiddenFactor(1.3).measure(problem, configs[2]).max_tile_bytes
    for (mu, sd), t in zip(together, tiles, strict=True):
        assert abs(mu - t / m.tile_capacity_bytes) < 2 * sd + 0.01  # and the truth within them


def test_a_warm_studys_first_compile_needs_95_percent_to_fit(tmp_path: Path) -> None:
    from ipu_autotune.guide.corrected import FIT_CONFIDENCE
    from ipu_autotune.guide.first_trials import FIRST_CONFIDENCE
    from ipu_autotune.guide.gain import expected_improvement
    from ipu_autotune.guide.guide import EDGE_CONFIDENCE, Guide, GuideSettings
    from ipu_autotune.guide.prior import GuidePrior
    from ipu_autotune.guide.proposal import History
    from ipu_autotune.guide.warmstart import proposals

    problem, profile, space, configs = _setup()
    warm = proposals(problem, profile, space, configs[0], headroom=0.05)

    def guide_with(prior: Any) -> Any:
        return Guide(
            problem,
            profile,
            space,
            GuideSettings(0.05, candidates=[p.config for p in warm], prior=prior),
        )

    # a store that agrees: the guide's choice, then the baseline
    store = open_store(_url(tmp_path, "sqlite"))
    for s in "abc":
        for r in records_of(s, factor=1.3):
            store.add(r)
    prior = not_none(
        session.prepare(
            store,
            _Study("new", "uid-new").as_study(),
            problem,
            profile,
            HiddenFactor(1.0),
            lambda s: None,
        )
    ).prior
    guide = guide_with(prior)
    first = first_trials(guide, warm[:2])
    assert "calibration store prior" in first[0].origin and first[1] is warm[0]
    assert first[0].reason is not None and not_none(first[0].chance) >= FIRST_CONFIDENCE
    assert CorrectedModel(guide.screen, [], 0.05).chance(first[0].config) >= FIRST_CONFIDENCE
    # a prior that puts this model's fast configs at 80-95 % to fit: the guide would take one
    # later in a study, but not as its first compile; nothing is 95 % sure, so the first is
    # the fastest in expectation of those likelier to fit than not (not the warm starts the
    # nominal estimate chose, nor the likeliest to fit: the slowest safe config)
    unsure = GuidePrior({"proportional": (6.0, 0.6)})
    later = guide_with(unsure).propose(History()).config
    model = CorrectedModel(guide_with(unsure).screen, [], 0.05)
    assert later is not None and FIT_CONFIDENCE <= model.chance(later) < FIRST_CONFIDENCE
    guide = guide_with(unsure)
    first = first_trials(guide, warm[:2])
    assert "likelier to fit than not" in first[0].origin and first[1] is warm[0]

    def expected(c: Any) -> float:
        return expected_improvement(model, c, 0.0)

    even = [c for c in guide.pool if model.chance(c) >= EDGE_CONFIDENCE]
    assert expected(first[0].config) == max(expected(c) for c in even)
    likeliest = max(guide.pool, key=model.log_chance)
    assert expected(first[0].config) > expected(likeliest)
    # a first trial the backend would not compile (the estimator's screen) is never chosen:
    # the next best is, and so for the confident choice above
    refused = first[0].config
    again = first_trials(guide_with(unsure), warm[:2], lambda c: c != refused)
    assert again[0].config != refused and "likelier to fit than not" in again[0].origin
    assert expected(again[0].config) == max(expected(c) for c in even if c != refused)
    # a prior under which nothing is an even bet: the likeliest to fit
    hopeless = GuidePrior({"proportional": (30.0, 0.6)})
    model = CorrectedModel(guide_with(hopeless).screen, [], 0.05)
    guide = guide_with(hopeless)
    assert max(model.chance(c) for c in guide.pool) < EDGE_CONFIDENCE
    first = first_trials(guide, warm[:2])
    assert "likeliest to fit" in first[0].origin
    assert model.log_chance(first[0].config) == max(model.log_chance(c) for c in guide.pool)
    chosen = first_trials(guide_with(prior), warm[:2])[0].config
    instead = first_trials(guide_with(prior), warm[:2], lambda c: c != chosen)
    assert instead[0].config != chosen and "calibration store prior" in instead[0].origin


class HighProportionHeavy(HiddenFactor):
    """A test IPU on which an available memory proportion of 0.5 or more holds 8 % of a tile
    more than the estimate on every IPU, which the estimator does not see."""

    def measure(self, problem: Any, config: Any) -> Any:
        m = super().measure(problem, config)
        if min(config.available_memory_proportion) < 0.5:
            return m
        tiles = [t + int(0.08 * m.tile_capacity_bytes) for t in m.max_tile_bytes]
        return dataclasses.replace(
            m, max_tile_bytes=tiles, feasible=max(tiles) <= m.tile_capacity_bytes
        )


def test_a_knobs_memory_in_other_studies_reaches_a_new_studys_first_judgement() -> None:
    """Stored studies held 8 % of a tile more at a high available memory proportion: a new
    study's guide expects that difference before its own first compile, also between two
    configs no study compiled as such (FP16 with offload, at a low proportion and a high
    one), and without the knob rows it does not (the memory parts alone are one fit for all)."""
    problem, profile, space, configs = _setup()
    backend = HighProportionHeavy(1.0)
    records = []
    for study in "abc":
        rec = Recorder(NO_STORE, problem, profile, backend, study, f"uid-{study}")
        records += [
            not_none(rec.record_of(i, c, backend.measure(problem, c)))
            for i, c in enumerate(configs)
        ]
    prior = fit_prior(records)
    assert prior is not None and len(prior.memory_rows) == 3 * len(configs) * problem.ipus
    base = configs[0]
    low = base.replace(available_memory_proportion=(0.3,) * base.ipus_per_replica)
    offload = base.replace(precision="16.16", optimizer_offload=True, gradient_accumulation=6)
    offload_low = offload.replace(available_memory_proportion=low.available_memory_proportion)
    assert offload not in configs and offload_low not in configs

    def heavier(prior: Any, config: Any, reference: Any) -> float:
        """How much more of a tile `reference`'s busiest tile holds than `config`'s, judged
        before any compile, beyond the nominal estimate's difference."""
        screen = Screen(problem, profile, prepare=None, space=space)
        screen.prior = prior
        model = CorrectedModel(screen, [], 0.05)
        nominal = (
            not_none(screen(reference)).max_tile_bytes[0]
            - not_none(screen(config)).max_tile_bytes[0]
        ) / not_none(screen(config)).tile_capacity_bytes
        busiest = not_none(model.judge(reference)).busiest - not_none(model.judge(config)).busiest
        return busiest - nominal

    for config, reference in ((low, base), (offload_low, offload)):
        assert heavier(prior, config, reference) == pytest.approx(0.08, abs=0.025)
        assert abs(heavier(dataclasses.replace(prior, memory_rows=()), config, reference)) < 0.02
