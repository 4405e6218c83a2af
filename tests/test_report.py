"""`ipu-autotune report`: one self-contained HTML page, looked at in a real browser
(must show, issue 13 item 3: headless Chromium)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
from png_pixels import colours, read_png
from testing import STUDY, TUNE, finished_study, not_none

from ipu_autotune.backends.base import Measurement
from ipu_autotune.cli import main
from ipu_autotune.report import gather, render
from ipu_autotune.study.records import ATTR_RECORD, records, stored_problem, trial_attrs

pytestmark = pytest.mark.slow
#: an element that would fetch from the network when the page opens
FETCH = re.compile(
    r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", re.IGNORECASE
)
SECTIONS = (
    "Summary",
    "Memory per IPU",
    "Bottleneck",
    "Optimization history",
    "Parameter importances",
    "Trials",
)
ACTIVATIONS = (0x72, 0xB7, 0xB2)  # the memory chart's colour for activations (report/figures.py)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return finished_study(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def report(study: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    url, _ = study
    path = tmp_path_factory.mktemp("page") / "report.html"
    assert main(["report", "--study", STUDY, "--storage", url, "-o", str(path)]) == 0
    return path


def test_report_is_one_self_contained_page_with_every_section(study: Any, report: Any) -> None:
    url, _ = study
    html = report.read_text()
    assert not FETCH.search(html), FETCH.search(html)
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js is inline (a few MB)
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in html
    assert html.count("Plotly.newPlot(") == 4  # memory, step time, history, importances
    s = optuna.load_study(study_name=STUDY, storage=url)
    table = html[html.index("<h2>Trials</h2>") :]
    assert table.count("<tr") == len(records(s)) + 1
    assert table.count("<tr class='best'>") == 1
    assert f"Best configuration (trial {s.best_trial.number})" in html
    assert "estimated" in html


def test_tune_with_out_writes_the_same_report(study: Any) -> None:
    _, out = study
    html = (out / "report.html").read_text()
    assert all(f"<h2>{t}</h2>" in html for t in SECTIONS) and not FETCH.search(html)


def test_a_tiny_study_gets_a_report_that_says_why_importances_are_missing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tiny.db'}"
    assert main([*TUNE, "--trials", "1", "--storage", url]) == 3  # only the baseline: nothing fits
    path = tmp_path / "tiny.html"
    assert main(["report", "--study", STUDY, "--storage", url, "-o", str(path)]) == 0
    html = path.read_text()
    assert "Parameter importances need at least 4 completed trials" in html
    assert "No configuration fits yet" in html and "Closest: trial 0" in html


def test_the_bottleneck_a_measurement_names_is_shown(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    assert main([*TUNE, "--trials", "1", "--storage", url]) == 3  # only the baseline: nothing fits
    s = optuna.load_study(study_name=STUDY, storage=url)
    rec = trial_attrs(s.trials[0])
    named = {"bottleneck": "host input pipeline", "bottleneck_share": 0.62}
    m = {**rec["measurement"], "feasible": True, "failure": None, "throughput": 1e6}
    if "bottleneck" in Measurement.__dataclass_fields__:  # a Measurement field since issue 11
        m.update(named)
    else:
        m["details"] = {**m.get("details", {}), **named}
    s.add_trial(
        optuna.trial.create_trial(
            value=1e6,
            system_attrs={"constraints": [-0.1]},
            user_attrs={ATTR_RECORD: {**rec, "measurement": m, "origin": "test"}},
        )
    )
    html = render(gather(s, not_none(stored_problem(s))))
    assert "host input pipeline</b>, 62% of the step" in html


def _chromium() -> str | None:
    return next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )


def test_the_report_renders_in_headless_chromium(report: Any, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Chromium (.ci/run: apt-get install -y chromium)")
        pytest.skip("no chromium on PATH (apt-get install chromium); CI runs this test")
    shot = tmp_path / "report.png"
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,1400",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert shot.is_file(), proc.stderr[-2000:]
    width, height, rows = read_png(shot)
    assert (width, height) == (1280, 1400)
    counts = colours(rows)
    white = counts.get((255, 255, 255), 0) / (width * height)
    assert len(counts) > 50 and white < 0.97, (len(counts), white)
    # The memory chart's bars are drawn by plotly.js: the page's scripts ran, offline.
    assert counts.get(ACTIVATIONS, 0) > 2000
