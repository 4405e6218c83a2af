"""Bad input, through the real CLI: exit 2, ONE line on stderr naming the problem and the fix,
no traceback, and nothing written to the storage.

Each case runs `ipu_autotune.cli.main` in-process (the model is traced once and cached) with
an SQLite storage in an empty folder, and checks afterwards that the database file was not
created, or, for the resume case, holds exactly the studies and trials it held before.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from testing import RESNET18, run_cli, sqlite_url
from workers_helpers import storage_snapshot

MODEL = ["resnet18", "--batch-size", "8"]


@pytest.fixture
def db(in_tmp: Path) -> Path:
    return in_tmp / "study.db"


def one_line_error(code: int, err: str, *needles: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert "Traceback" not in err
    line = lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


def tune(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, *args, "--storage", sqlite_url(db))


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- the model and the micro-batch -------------------------------------------------------------


@pytest.mark.parametrize(
    "model, needles",
    [
        ("resnet51", ["unknown model 'resnet51'", "did you mean", "resnet50"]),
        (
            "zzzzqqq",
            ["unknown model 'zzzzqqq'", "package.module:factory"],
        ),  # no close name: say what works
    ],
    ids=["close names suggested", "no close name"],
)
def test_unknown_model(
    capsys: pytest.CaptureFixture[str], db: Path, model: str, needles: list[Any]
) -> None:
    code, _, err = tune(capsys, db, model, "--batch-size", "8")
    one_line_error(code, err, *needles)
    assert not db.exists()


@pytest.mark.parametrize(
    "value, needle",
    [
        ("0", "must be positive, got 0"),
        ("-1", "must be positive, got -1"),
        ("abc", "expected a whole number, got 'abc'"),
    ],
)
def test_bad_micro_batch(
    capsys: pytest.CaptureFixture[str], db: Path, value: str, needle: str
) -> None:
    code, _, err = tune(capsys, db, "resnet18", "--batch-size", value)
    one_line_error(code, err, "--batch-size", needle)
    assert not db.exists()


# --- files ---------------------------------------------------------------------------------------

#: (flag, file name, its text or None for a file that is not there, what the error line names
#: besides the file)
FILES = {
    "malformed baseline": (
        "--baseline",
        "base.toml",
        '[config]\nprecision = "16.16\n',
        ["malformed TOML", "line 2"],
    ),
    "malformed space": (
        "--space",
        "space.toml",
        "[knobs]\nprecision = [\n",
        ["malformed TOML", "line 2"],
    ),
    "unknown config key": (
        "--baseline",
        "base.toml",
        '[config]\nprecison = "16.16"\n',
        ["unknown key 'precison'", "did you mean 'precision'"],
    ),
    "unknown space knob": (
        "--space",
        "space.toml",
        "[knobs]\ngradient_accumulaton = [4]\n",
        ["unknown knob 'gradient_accumulaton'", "did you mean 'gradient_accumulation'"],
    ),
    "missing baseline": ("--baseline", "nope.toml", None, ["no such file"]),
}


@pytest.mark.parametrize("case", FILES, ids=list(FILES))
def test_a_bad_file_is_named_with_what_is_wrong(
    capsys: pytest.CaptureFixture[str], db: Path, in_tmp: Any, case: Any
) -> None:
    flag, name, text, needles = FILES[case]
    path = write(in_tmp / name, text) if text is not None else str(in_tmp / name)
    code, _, err = tune(capsys, db, *MODEL, flag, path)
    one_line_error(code, err, path, *needles)
    assert not db.exists()


# --- the rules of DESIGN.md, one baseline each ---------------------------------------------------

PIPE2 = 'ipus_per_replica = 2\nsplits = ["layer3"]\ngradient_accumulation = 3\n'
RULES = {
    # ipus_per_replica * replicas <= ipus
    "ipus": (
        'ipus_per_replica = 2\nreplicas = 2\nsplits = ["layer3"]\ngradient_accumulation = 3\n',
        [],
        ["needs 4 IPUs", "replicas 2", "the problem has 2", "raise --ipus"],
    ),
    # len(splits) == ipus_per_replica - 1
    "split count": (
        "ipus_per_replica = 2\nsplits = []\ngradient_accumulation = 3\n",
        [],
        ["0 split(s) for ipus_per_replica 2", "N-1 splits"],
    ),
    # splits in execution order
    "split order": (
        'ipus_per_replica = 4\nsplits = ["layer4", "layer2", "layer3"]\ngradient_accumulation = '
        "7\n",
        ["--ipus", "4"],
        ["out of execution order", "in the order the modules run"],
    ),
    # one AMP value per IPU of a replica
    "amp count": (
        PIPE2 + "available_memory_proportion = [0.5]\n",
        [],
        ["available_memory_proportion has 1 value(s)", "one per IPU"],
    ),
    # each AMP in (0, 1]
    "amp range": (
        PIPE2 + "available_memory_proportion = [0.5, 1.5]\n",
        [],
        ["available_memory_proportion[1] = 1.5 is outside (0, 1]"],
    ),
    # pipelined training: gradient_accumulation >= 2 * ipus_per_replica - 1
    "pipeline accumulation": (
        'ipus_per_replica = 2\nsplits = ["layer3"]\ngradient_accumulation = 2\n',
        [],
        ["needs gradient_accumulation >= 3", "got 2"],
    ),
    # io_tiles even in [32, 192]
    "io tiles range": (
        'io_tiles = 33\nexecution = "sharded"\n',
        [],
        ["io_tiles must be 0 or an even number in [32, 192]"],
    ),
    # io_tiles not with pipelined execution
    "io tiles pipelined": (PIPE2 + "io_tiles = 32\n", [], ['io_tiles need execution = "sharded"']),
    # automatic loss scaling only with fp16 weights
    "auto loss scaling": (
        'precision = "16.32"\nloss_scaling = "auto"\n',
        [],
        ['"auto" needs fp16 weights'],
    ),
    # replicated tensor sharding only with replicas > 1
    "sharding": (
        "replicated_tensor_sharding = true\n",
        [],
        ["replicated_tensor_sharding needs replicas > 1"],
    ),
    # on hardware PopTorch reserves a power of two of IPUs (autoRoundNumIPUs): they must exist
    "power of two": (
        'ipus_per_replica = 2\nsplits = ["layer3"]\nreplicas = 3\n',
        ["--ipus", "6"],
        ["uses 6 IPUs", "power of two: 8", "the problem has 6"],
    ),
    # a fixed global batch
    "global batch": (
        "gradient_accumulation = 3\n",
        ["--global-batch", "64"],
        ["global batch is fixed at 64", "= 24"],
    ),
}


@pytest.mark.parametrize("rule", RULES, ids=list(RULES))
def test_a_baseline_breaking_a_rule_names_the_rule(
    capsys: pytest.CaptureFixture[str], db: Path, in_tmp: Any, rule: Any
) -> None:
    text, flags, needles = RULES[rule]
    path = write(in_tmp / "base.toml", "[config]\n" + text)
    code, _, err = tune(capsys, db, *MODEL, *flags, "--baseline", path)
    one_line_error(code, err, f"{path} breaks a rule", *needles)
    assert not db.exists()


#: baselines the problem or the model rejects (not a rule of the config alone): text, flags,
#: needles
REJECTED = {
    "fewer IPUs than it needs": (
        PIPE2,
        ["--ipus", "1"],
        ["needs 2 IPUs", "the problem has 1", "raise --ipus"],
    ),
    "split not a module": (
        'ipus_per_replica = 2\nsplits = ["layer3.9"]\ngradient_accumulation = 3\n',
        [],
        [
            "split 'layer3.9' is not a module of the model that runs in the forward pass",
            "closest:",
            "layer3.0",
        ],
    ),
    "split not a path": (
        "ipus_per_replica = 2\nsplits = [\"layer3'); import os; ('\"]\ngradient_accumulation = "
        "3\n",
        [],
        ["is not a module path"],
    ),
}


@pytest.mark.parametrize("case", REJECTED, ids=list(REJECTED))
def test_a_baseline_the_problem_or_model_rejects(
    capsys: pytest.CaptureFixture[str], db: Path, in_tmp: Any, case: Any
) -> None:
    text, flags, needles = REJECTED[case]
    path = write(in_tmp / "base.toml", "[config]\n" + text)
    code, _, err = tune(capsys, db, *MODEL, *flags, "--baseline", path)
    one_line_error(code, err, *needles)
    assert not db.exists()


# --- search spaces that leave nothing to search --------------------------------------------------


@pytest.mark.parametrize(
    "text, needles",
    [
        ("[knobs]\nprecision = []\n", ["precision has no values", "give at least one"]),
        ("[knobs]\nipus_per_replica = [4]\n", ["no IPU layout fits", "--ipus"]),
        (
            '[knobs]\nipus_per_replica = [1]\nrecompute = "pipeline"\n',
            ["no valid value for recompute"],
        ),
        (
            '[knobs]\nprecision = "16.32"\nloss_scaling = "auto"\n',
            ["no valid value for loss_scaling"],
        ),
    ],
    ids=["empty list", "no layout", "no recompute mode", "no loss scale"],
)
def test_empty_search_space(
    capsys: pytest.CaptureFixture[str], db: Path, in_tmp: Any, text: str, needles: list[Any]
) -> None:
    path = write(in_tmp / "space.toml", text)
    code, _, err = tune(capsys, db, *MODEL, "--space", path)
    one_line_error(code, err, *needles)
    assert storage_snapshot(db) == []  # no study, no trial


# --- storage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "foo",
        "http://x",
        "sqlite:",
        "journal:///no/such/folder/s.journal",
        "sqlite:///no/such/folder/s.db",
    ],
)
def test_storage_url_that_cannot_work(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, url: str
) -> None:
    start = time.monotonic()
    code, _, err = run_cli(capsys, *MODEL, "--storage", url)
    one_line_error(code, err, "storage")
    assert time.monotonic() - start < 5  # checked before the model is traced
    assert list(in_tmp.iterdir()) == []


@pytest.mark.slow
def test_unreachable_postgres_fails_fast_without_the_password(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    start = time.monotonic()
    code, out, err = run_cli(capsys, *MODEL, "--storage", "postgresql://u:secret@127.0.0.1:1/db")
    line = one_line_error(code, err, "unreachable", "postgresql://u:***@127.0.0.1:1/db")
    assert "secret" not in out + err, line
    assert time.monotonic() - start < 60


def test_unparsable_postgres_url_without_the_password(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    code, out, err = run_cli(capsys, *MODEL, "--storage", "postgresql://u:secret@host:port/db")
    one_line_error(code, err, "cannot be parsed")
    assert "secret" not in out + err


@pytest.mark.parametrize(
    "command", [["show", "--study", "x"], ["studies"], ["export", "--study", "x"]]
)
def test_read_commands_on_an_unreachable_postgres_hide_the_password(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, command: list[Any]
) -> None:
    code, out, err = run_cli(capsys, *command, "--storage", "postgresql://u:secret@127.0.0.1:1/db")
    one_line_error(code, err, "unreachable")
    assert "secret" not in out + err


# --- resuming ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_resuming_with_a_different_problem(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    from ipu_autotune.study import records as st
    from ipu_autotune.study.storage import open_storage

    problem = RESNET18
    st.open_study(open_storage(sqlite_url(db)), problem.slug, problem, 0, lambda study: None)
    before = storage_snapshot(db)
    assert before == [(problem.slug, None, None)]
    code, _, err = tune(capsys, db, "resnet18", "--batch-size", "16", "--study", problem.slug)
    one_line_error(
        code,
        err,
        f"study '{problem.slug}' holds a different problem",
        "batch_size 8 -> 16",
        "resume with the same options or pick a new --study name",
    )
    assert storage_snapshot(db) == before


def test_a_study_name_used_by_another_tool(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    import optuna

    theirs = optuna.create_study(study_name="theirs", storage=sqlite_url(db))
    theirs.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    before = storage_snapshot(db)
    code, _, err = tune(capsys, db, *MODEL, "--study", "theirs")
    one_line_error(code, err, "not made by ipu-autotune", "choose another --study name")
    assert storage_snapshot(db) == before


def test_export_of_a_missing_study_lists_the_ones_there(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    from ipu_autotune.study import records as st
    from ipu_autotune.study.storage import open_storage

    st.open_study(open_storage(sqlite_url(db)), "mine", RESNET18, 0, lambda study: None)
    code, _, err = run_cli(capsys, "export", "--storage", sqlite_url(db), "--study", "minE")
    one_line_error(code, err, "no study 'minE'", "studies there: mine")
