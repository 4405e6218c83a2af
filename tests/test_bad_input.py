"""Bad input, through the real CLI: exit 2, ONE line on stderr naming the problem and the fix,
no traceback, and nothing written to the storage.

Each case runs `ipu_autotune.cli.main` in-process (the model is traced once and cached) with
an SQLite storage in an empty folder, and checks afterwards that the database file was not
created, or, for the resume case, holds exactly the studies and trials it held before.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ipu_autotune.cli import main
from workers_helpers import storage_snapshot

MODEL = ["resnet18", "--batch-size", "8"]


@pytest.fixture
def db(in_tmp) -> Path:
    return in_tmp / "study.db"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


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


def tune(capsys, db: Path, *args: str) -> tuple[int, str, str]:
    return run(capsys, *args, "--storage", f"sqlite:///{db}")


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- the model and the micro-batch -------------------------------------------------------------

def test_unknown_model_suggests_close_names(capsys, db):
    code, _, err = tune(capsys, db, "resnet51", "--batch-size", "8")
    one_line_error(code, err, "unknown model 'resnet51'", "did you mean", "resnet50")
    assert not db.exists()


def test_unknown_model_without_close_match_says_what_works(capsys, db):
    code, _, err = tune(capsys, db, "zzzzqqq", "--batch-size", "8")
    one_line_error(code, err, "unknown model 'zzzzqqq'", "package.module:factory")
    assert not db.exists()


@pytest.mark.parametrize("value, needle", [("0", "must be positive, got 0"), ("-1", "must be positive, got -1"),
                                           ("abc", "expected a whole number, got 'abc'")])
def test_bad_micro_batch(capsys, db, value, needle):
    code, _, err = tune(capsys, db, "resnet18", "--batch-size", value)
    one_line_error(code, err, "--batch-size", needle)
    assert not db.exists()


# --- files ---------------------------------------------------------------------------------------

def test_malformed_baseline_toml_names_file_and_line(capsys, db, in_tmp):
    path = write(in_tmp / "base.toml", '[config]\nprecision = "16.16\n')
    code, _, err = tune(capsys, db, *MODEL, "--baseline", path)
    one_line_error(code, err, path, "malformed TOML", "line 2")
    assert not db.exists()


def test_malformed_space_toml_names_file_and_line(capsys, db, in_tmp):
    path = write(in_tmp / "space.toml", "[knobs]\nprecision = [\n")
    code, _, err = tune(capsys, db, *MODEL, "--space", path)
    one_line_error(code, err, path, "malformed TOML", "line 2")
    assert not db.exists()


def test_unknown_config_key_suggests_the_known_one(capsys, db, in_tmp):
    path = write(in_tmp / "base.toml", '[config]\nprecison = "16.16"\n')
    code, _, err = tune(capsys, db, *MODEL, "--baseline", path)
    one_line_error(code, err, path, "unknown key 'precison'", "did you mean 'precision'")
    assert not db.exists()


def test_unknown_space_knob_suggests_the_known_one(capsys, db, in_tmp):
    path = write(in_tmp / "space.toml", "[knobs]\ngradient_accumulaton = [4]\n")
    code, _, err = tune(capsys, db, *MODEL, "--space", path)
    one_line_error(code, err, path, "unknown knob 'gradient_accumulaton'", "did you mean 'gradient_accumulation'")
    assert not db.exists()


def test_missing_baseline_file(capsys, db, in_tmp):
    code, _, err = tune(capsys, db, *MODEL, "--baseline", str(in_tmp / "nope.toml"))
    one_line_error(code, err, "nope.toml", "no such file")
    assert not db.exists()


# --- the rules of DESIGN.md, one baseline each ------------------------------------------------------

PIPE2 = 'ipus_per_replica = 2\nsplits = ["layer3"]\ngradient_accumulation = 3\n'
RULES = {
    # ipus_per_replica * replicas <= ipus
    "ipus": ('ipus_per_replica = 2\nreplicas = 2\nsplits = ["layer3"]\ngradient_accumulation = 3\n', [],
             ["needs 4 IPUs", "replicas 2", "the problem has 2", "raise --ipus"]),
    # len(splits) == ipus_per_replica - 1
    "split count": ('ipus_per_replica = 2\nsplits = []\ngradient_accumulation = 3\n', [],
                    ["0 split(s) for ipus_per_replica 2", "N-1 splits"]),
    # splits in execution order
    "split order": ('ipus_per_replica = 4\nsplits = ["layer4", "layer2", "layer3"]\ngradient_accumulation = 7\n',
                    ["--ipus", "4"], ["out of execution order", "in the order the modules run"]),
    # one AMP value per IPU of a replica
    "amp count": (PIPE2 + "available_memory_proportion = [0.5]\n", [],
                  ["available_memory_proportion has 1 value(s)", "one per IPU"]),
    # each AMP in (0, 1]
    "amp range": (PIPE2 + "available_memory_proportion = [0.5, 1.5]\n", [],
                  ["available_memory_proportion[1] = 1.5 is outside (0, 1]"]),
    # pipelined training: gradient_accumulation >= 2 * ipus_per_replica - 1
    "pipeline accumulation": ('ipus_per_replica = 2\nsplits = ["layer3"]\ngradient_accumulation = 2\n', [],
                              ["needs gradient_accumulation >= 3", "got 2"]),
    # io_tiles even in [32, 192]
    "io tiles range": ("io_tiles = 33\nexecution = \"sharded\"\n", [], ["io_tiles must be 0 or an even number in [32, 192]"]),
    # io_tiles not with pipelined execution
    "io tiles pipelined": (PIPE2 + "io_tiles = 32\n", [], ["io_tiles need execution = \"sharded\""]),
    # automatic loss scaling only with fp16 weights
    "auto loss scaling": ('precision = "16.32"\nloss_scaling = "auto"\n', [], ['"auto" needs fp16 weights']),
    # replicated tensor sharding only with replicas > 1
    "sharding": ("replicated_tensor_sharding = true\n", [], ["replicated_tensor_sharding needs replicas > 1"]),
    # on hardware the IPU count is a power of two
    "power of two": ('ipus_per_replica = 3\nsplits = ["layer2", "layer3"]\ngradient_accumulation = 5\n',
                     ["--ipus", "4"], ["uses 3 IPUs", "power of two"]),
    # a fixed global batch
    "global batch": ("gradient_accumulation = 3\n", ["--global-batch", "64"], ["global batch is fixed at 64", "= 24"]),
}


@pytest.mark.parametrize("rule", RULES, ids=list(RULES))
def test_a_baseline_breaking_a_rule_names_the_rule(capsys, db, in_tmp, rule):
    text, flags, needles = RULES[rule]
    path = write(in_tmp / "base.toml", "[config]\n" + text)
    code, _, err = tune(capsys, db, *MODEL, *flags, "--baseline", path)
    one_line_error(code, err, f"{path} breaks a rule", *needles)
    assert not db.exists()


def test_fewer_ipus_than_the_config_needs(capsys, db, in_tmp):
    path = write(in_tmp / "base.toml", "[config]\n" + PIPE2)
    code, _, err = tune(capsys, db, *MODEL, "--ipus", "1", "--baseline", path)
    one_line_error(code, err, "needs 2 IPUs", "the problem has 1", "raise --ipus")
    assert not db.exists()


def test_split_that_is_not_a_module_names_the_closest(capsys, db, in_tmp):
    path = write(in_tmp / "base.toml", '[config]\nipus_per_replica = 2\nsplits = ["layer3.9"]\n'
                                       "gradient_accumulation = 3\n")
    code, _, err = tune(capsys, db, *MODEL, "--baseline", path)
    one_line_error(code, err, "split 'layer3.9' is not a module of the model", "closest:", "layer3.0")
    assert not db.exists()


def test_split_that_is_not_a_path_at_all(capsys, db, in_tmp):
    path = write(in_tmp / "base.toml", "[config]\nipus_per_replica = 2\nsplits = [\"layer3'); import os; ('\"]\n"
                                       "gradient_accumulation = 3\n")
    code, _, err = tune(capsys, db, *MODEL, "--baseline", path)
    one_line_error(code, err, "is not a module path")
    assert not db.exists()


# --- search spaces that leave nothing to search ---------------------------------------------------

@pytest.mark.parametrize("text, needles", [
    ("[knobs]\nprecision = []\n", ["precision has no values", "give at least one"]),
    ("[knobs]\nipus_per_replica = [4]\n", ["no IPU layout fits", "--ipus"]),
    ("[knobs]\nipus_per_replica = [1]\nrecompute = \"pipeline\"\n", ["no valid value for recompute"]),
    ('[knobs]\nprecision = "16.32"\nloss_scaling = "auto"\n', ["no valid value for loss_scaling"]),
], ids=["empty list", "no layout", "no recompute mode", "no loss scale"])
def test_empty_search_space(capsys, db, in_tmp, text, needles):
    path = write(in_tmp / "space.toml", text)
    code, _, err = tune(capsys, db, *MODEL, "--space", path)
    one_line_error(code, err, *needles)
    assert storage_snapshot(db) == []  # no study, no trial


# --- storage -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["foo", "http://x", "sqlite:", "journal:///no/such/folder/s.journal",
                                 "sqlite:///no/such/folder/s.db"])
def test_storage_url_that_cannot_work(capsys, in_tmp, url):
    start = time.monotonic()
    code, _, err = run(capsys, *MODEL, "--storage", url)
    one_line_error(code, err, "storage")
    assert time.monotonic() - start < 5  # checked before the model is traced
    assert list(in_tmp.iterdir()) == []


def test_unreachable_postgres_fails_fast_without_the_password(capsys, in_tmp):
    start = time.monotonic()
    code, out, err = run(capsys, *MODEL, "--storage", "postgresql://u:secret@127.0.0.1:1/db")
    line = one_line_error(code, err, "unreachable", "postgresql://u:***@127.0.0.1:1/db")
    assert "secret" not in out + err, line
    assert time.monotonic() - start < 60


def test_unparsable_postgres_url_without_the_password(capsys, in_tmp):
    code, out, err = run(capsys, *MODEL, "--storage", "postgresql://u:secret@host:port/db")
    one_line_error(code, err, "cannot be parsed")
    assert "secret" not in out + err


@pytest.mark.parametrize("command", [["show", "--study", "x"], ["studies"], ["export", "--study", "x"]])
def test_read_commands_on_an_unreachable_postgres_hide_the_password(capsys, in_tmp, command):
    code, out, err = run(capsys, *command, "--storage", "postgresql://u:secret@127.0.0.1:1/db")
    one_line_error(code, err, "unreachable")
    assert "secret" not in out + err


# --- resuming ----------------------------------------------------------------------------------------

def test_resuming_with_a_different_problem(capsys, db):
    from ipu_autotune.study import records as st
    from ipu_autotune.problem import Problem
    from ipu_autotune.study.storage import open_storage

    problem = Problem("resnet18", 8)
    st.open_study(open_storage(f"sqlite:///{db}"), problem.slug, problem, 0, lambda study: None)
    before = storage_snapshot(db)
    assert before == [(problem.slug, None, None)]
    code, _, err = tune(capsys, db, "resnet18", "--batch-size", "16", "--study", problem.slug)
    one_line_error(code, err, f"study '{problem.slug}' holds a different problem", "batch_size 8 -> 16",
                   "resume with the same options or pick a new --study name")
    assert storage_snapshot(db) == before


def test_a_study_name_used_by_another_tool(capsys, db):
    import optuna

    theirs = optuna.create_study(study_name="theirs", storage=f"sqlite:///{db}")
    theirs.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    before = storage_snapshot(db)
    code, _, err = tune(capsys, db, *MODEL, "--study", "theirs")
    one_line_error(code, err, "not made by ipu-autotune", "choose another --study name")
    assert storage_snapshot(db) == before


def test_export_of_a_missing_study_lists_the_ones_there(capsys, db):
    from ipu_autotune.study import records as st
    from ipu_autotune.problem import Problem
    from ipu_autotune.study.storage import open_storage

    problem = Problem("resnet18", 8)
    st.open_study(open_storage(f"sqlite:///{db}"), "mine", problem, 0, lambda study: None)
    code, _, err = run(capsys, "export", "--storage", f"sqlite:///{db}", "--study", "minE")
    one_line_error(code, err, "no study 'minE'", "studies there: mine")
