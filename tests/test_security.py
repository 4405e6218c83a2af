"""A study database is input too: what it holds never becomes code, and secrets never output.

- `export` of a crafted trial (code in a split path, a newline in a checkpoint, a string
  where a number belongs, ...) refuses with exit 2 and a clear line, and writes no file.
- Free text that does reach a snippet (study name, numerics notes) stays inside comments.
- Passwords in storage URLs are masked wherever a URL is printed.
- A `module:factory` stored in a study is never imported by show, export or studies, nor by
  a tune that names another model.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import workers_helpers as wh
from testing import RESNET18 as PROBLEM

from ipu_autotune.backends.estimate import EstimateBackend
from ipu_autotune.cli import main
from ipu_autotune.problem import Config
from ipu_autotune.study import records as st
from ipu_autotune.study.storage import mask_url

optuna.logging.set_verbosity(optuna.logging.WARNING)
GOOD = Config(precision="16.16", ipus_per_replica=2, splits=("layer3",), gradient_accumulation=3)


def make_study(
    db: Path,
    name: str,
    config: dict[str, Any],
    problem: dict[str, Any] | None = None,
    measurement: dict[str, Any] | None = None,
    study_attrs: dict[str, Any] | None = None,
) -> str:
    """An ipu-autotune-looking study with one completed, feasible trial holding `config`."""
    url = f"sqlite:///{db}"
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    study.set_user_attr(st.ATTR_PROBLEM, problem or PROBLEM.to_dict())
    study.set_user_attr(st.ATTR_VERSION, "0.1.0")
    for key, value in (study_attrs or {}).items():
        study.set_user_attr(key, value)
    m = measurement or EstimateBackend().measure(PROBLEM, GOOD).to_dict()
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE,
            value=1000.0,
            user_attrs={"config": config, "measurement": m, "origin": "sampled"},
            system_attrs={"constraints": [-0.1]},
        )
    )
    return url


def export(
    capsys: pytest.CaptureFixture[str], url: str, name: str, out: Path, *extra: str
) -> tuple[int, str, str]:
    code = main(["export", "--storage", url, "--study", name, "-o", str(out), *extra])
    o, e = capsys.readouterr()
    return code, o, e


def safe_code(source: str) -> None:
    """The snippet imports only torch and poptorch and calls nothing from os/subprocess."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert set(names) <= {"torch", "poptorch"}, names
        if isinstance(node, ast.Name):
            assert node.id not in ("os", "subprocess", "eval", "exec", "__import__"), node.id


GOOD_DICT = GOOD.to_dict()
CRAFTED = {
    "code in a split": {
        **GOOD_DICT,
        "splits": ["layer1'); import os; os.system('touch PWNED'); ('"],
    },
    "quote in a split": {**GOOD_DICT, "splits": ['layer1"); import os; ("']},
    "newline in a checkpoint": {
        **GOOD_DICT,
        "checkpoints": ["layer1\nimport os\nos.system('touch PWNED')"],
    },
    "code as AMP": {**GOOD_DICT, "available_memory_proportion": ["0.5); import os; (", 0.5]},
    "NaN AMP": {**GOOD_DICT, "available_memory_proportion": [math.nan, 0.5]},
    "code as loss scale": {**GOOD_DICT, "loss_scaling": "1.0); import os; ("},
    "code as precision": {**GOOD_DICT, "precision": "16.16\nimport os"},
    "code as accumulation": {**GOOD_DICT, "gradient_accumulation": "3); import os; ("},
    "unknown key": {**GOOD_DICT, "__class__": "os.system"},
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CRAFTED, ids=list(CRAFTED))
@pytest.mark.parametrize("pick", [["--trial", "0"], []], ids=["trial 0", "best"])
def test_export_refuses_a_crafted_config(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, case: Any, pick: list[Any]
) -> None:
    url = make_study(in_tmp / "evil.db", "evil", CRAFTED[case])
    out = in_tmp / "best_options.py"
    code, stdout, err = export(capsys, url, "evil", out, *pick)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert "trial 0" in lines[0] or "evil" in lines[0]
    assert not out.exists()  # never writes the code
    assert "import os" not in stdout
    assert not (in_tmp / "PWNED").exists()


@pytest.mark.parametrize(
    "field, value",
    [
        ("batch_size", "8); import os; ("),
        ("optimizer", "adamw\nimport os"),
        ("input_shape", [3, "64); import os; (", 64]),
    ],
)
def test_export_refuses_a_crafted_problem(
    capsys: pytest.CaptureFixture[str], in_tmp: Any, field: str, value: list[Any] | str
) -> None:
    url = make_study(
        in_tmp / "evil.db", "evil", GOOD_DICT, problem={**PROBLEM.to_dict(), field: value}
    )
    out = in_tmp / "best_options.py"
    code, _, err = export(capsys, url, "evil", out, "--trial", "0")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "stored problem" in err, err
    assert not out.exists()


def test_a_crafted_measurement_is_refused_not_crashed_on(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    m = {**EstimateBackend().measure(PROBLEM, GOOD).to_dict(), "throughput": "1e9); import os; ("}
    url = make_study(in_tmp / "evil.db", "evil", GOOD_DICT, measurement=m)
    out = in_tmp / "best_options.py"
    code, _, err = export(capsys, url, "evil", out, "--trial", "0")
    # refused as it is read (record_schema.py), in one line naming the trial and the field
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "trial 0 measurement: 'throughput' must be a number" in err, err
    assert not out.exists()


def test_free_text_stays_in_comments(capsys: pytest.CaptureFixture[str], in_tmp: Any) -> None:
    """A study name and stored notes with newlines and code: exported, but only as comments."""
    from ipu_autotune.numerics.advice import advise

    name = "evil\nimport os; os.system('touch PWNED')\n"
    notes = advise(wh.problem(), steps=2).to_dict()
    notes["loss_scale"]["reason"] = (
        "fine\nimport os\r\nos.system('touch PWNED')\x0b" + '"' * 3 + "'" * 3
    )
    # the exported config (loss scale 1) follows this advice, so its reason is exported
    notes["loss_scale"].update(auto=False, scale=1.0)
    url = make_study(in_tmp / "evil.db", name, GOOD_DICT, study_attrs={st.ATTR_NUMERICS: notes})
    out = in_tmp / "best_options.py"
    code, _, err = export(capsys, url, name, out, "--trial", "0")
    assert code == 0, err
    source = out.read_text()
    safe_code(source)
    assert source.count("os.system") == 2  # both texts are there, each inside a comment
    assert all(line.startswith("#") for line in source.splitlines() if "os.system" in line)
    assert not (in_tmp / "PWNED").exists()


def test_unreadable_stored_notes_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    name = "evil\nname"
    notes = {"loss_scale": {"scale": 128.0, "reason": "partial"}}
    url = make_study(in_tmp / "evil.db", name, GOOD_DICT, study_attrs={st.ATTR_NUMERICS: notes})
    out = in_tmp / "best_options.py"
    code, _, err = export(capsys, url, name, out, "--trial", "0")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "study 'evil\\nname': its stored numerics advice is unreadable" in err
    assert not out.exists()


def test_a_good_trial_exports_safe_code(capsys: pytest.CaptureFixture[str], in_tmp: Any) -> None:
    url = make_study(in_tmp / "good.db", "good", GOOD_DICT)
    out = in_tmp / "best_options.py"
    code, _, err = export(capsys, url, "good", out)
    assert code == 0, err
    source = out.read_text()
    safe_code(source)
    assert "model.get_submodule('layer3')" in source


# --- passwords -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, masked",
    [
        (
            "postgresql://u:secret@db.example:5432/studies",
            "postgresql://u:***@db.example:5432/studies",
        ),
        ("postgresql+psycopg://u:se@cr:et@host/db", "postgresql+psycopg://u:***@host/db"),
        (
            "postgresql://u:se/cret@host/db?sslmode=require",
            "postgresql://u:***@host/db?sslmode=require",
        ),
        ("mysql://root:secret@localhost/x", "mysql://root:***@localhost/x"),
        (
            "postgresql://host/db?user=u&password=secret",
            "postgresql://host/db?user=u&password=***",
        ),
        (
            "could not connect to postgresql://u:secret@h/db: password=secret rejected",
            "could not connect to postgresql://u:***@h/db: password=*** rejected",
        ),
        ("sqlite:////tmp/a:b@c.db", "sqlite:////tmp/a:b@c.db"),
        ("postgresql://u@host/db", "postgresql://u@host/db"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert "secret" not in mask_url(url)


def test_tune_output_masks_the_password_in_every_line(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    code = main(
        [
            "resnet18",
            "--batch-size",
            "8",
            "--storage",
            "postgresql://me:hunter2@127.0.0.1:1/studies",
            "--debug",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2
    assert "hunter2" not in out + err and "me:***@127.0.0.1:1" in err


# --- stored module:factory -----------------------------------------------------------------------

EVIL = """
from pathlib import Path
Path(__file__).with_name("IMPORTED").write_text("evil_module_x was imported")

def factory(num_classes=10):
    raise SystemExit("never built")
"""


@pytest.mark.slow
def test_a_stored_factory_is_never_imported_by_reading_commands(tmp_path: Path) -> None:
    (tmp_path / "evil_module_x.py").write_text(EVIL)
    marker = tmp_path / "IMPORTED"
    env = wh.env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    # The module is importable in this environment: a command that imported it would leave the
    # marker.
    subprocess.run(
        [sys.executable, "-c", "import evil_module_x"], env=env, cwd=tmp_path, check=True
    )
    assert marker.exists()
    marker.unlink()

    problem = {**PROBLEM.to_dict(), "model": "evil_module_x:factory", "input_shape": [3, 64, 64]}
    url = make_study(tmp_path / "s.db", "stored", GOOD_DICT, problem=problem)
    for command in (
        ["show", "--study", "stored"],
        ["show", "--study", "stored", "--json"],
        ["studies"],
        ["studies", "--json"],
        ["export", "--study", "stored"],
        ["export", "--study", "stored", "--format", "toml"],
    ):
        run = subprocess.run(
            [wh.cli_exe(), *command, "--storage", url],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, (command, run.stderr)
        assert not marker.exists(), f"{command} imported the stored factory"
    # Resuming the study under another model's name stops at the problem check, importing nothing.
    run = subprocess.run(
        [wh.cli_exe(), "resnet18", "--batch-size", "8", "--study", "stored", "--storage", url],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "holds a different problem" in run.stderr, run.stderr
    assert not marker.exists()
