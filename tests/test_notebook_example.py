"""examples/*.ipynb run top to bottom on a real Jupyter kernel (nbclient, ipykernel) of this
interpreter, and their result cells show what the notebook promises: the live trial table in
a widget, the summary's HTML with memory bars, a best configuration that fits, the exports."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("ipykernel.kernelspec")

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.ipynb"))
pytestmark = pytest.mark.slow
KERNEL = "ipu-autotune-test"


def _kernel_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernel spec for this very interpreter, so the kernel imports the ipu_autotune under
    test."""
    prefix = tmp_path / "jupyter"
    kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(
            filter(None, [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")])
        ),
    )
    return KERNEL


def _run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:  # a NotebookNode
    _kernel_spec(tmp_path, monkeypatch)
    nb = nbformat.read(path, as_version=4)
    # appended in memory only: which interpreter the kernel is
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('KERNEL', sys.executable)"))
    work = tmp_path / "work"
    work.mkdir()
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    return nb


def _outputs(nb: Any, needle: str) -> list[Any]:
    """The outputs of the code cell whose source contains `needle`."""
    cells = [c for c in nb.cells if c.cell_type == "code" and needle in c.source]
    assert len(cells) == 1, needle
    outputs: list[Any] = cells[0].outputs
    return outputs


def _html(outputs: Any) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


def _text(outputs: Any) -> str:
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_example_notebook_runs_and_shows_a_fitting_best(
    path: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert path.name == "tune_in_a_notebook.ipynb"  # the checks below are this notebook's
    nb = _run(path, tmp_path, monkeypatch)
    work = tmp_path / "work"
    assert _text(nb.cells[-1].outputs).split() == ["KERNEL", sys.executable]
    # live progress: the trial table drawn in an output widget, which ends with every trial
    tune_outputs = _outputs(nb, "ipu_autotune.tune(")
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in tune_outputs
    )
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    live = [
        json.dumps(w["state"].get("outputs", []))
        for w in state.values()
        if w["model_name"] == "OutputModel"
    ]
    assert any("baseline" in text and "12/12" in text for text in live)
    # the result's own display: the summary table with memory bars, baseline OOM, best fits
    summary = _html(_outputs(nb, "result  # the summary"))
    assert summary.startswith("<pre") and "best (trial" in summary and "IPU0 memory" in summary
    assert "█" in summary and "OOM by" in summary and re.search(r"best trial \d+ fits", summary)
    printed = _text(_outputs(nb, "best = result.best"))
    assert re.search(r"best: trial \d+, fits, [\d,]+ samples/s \(estimated\)", printed), printed
    assert "12 trials; baseline: OOM by" in printed
    # the exports: the snippet as a file that compiles, the report, the estimate of the best
    snippet = (work / "tinynet_options.py").read_text()
    compile(snippet, "tinynet_options.py", "exec")
    assert "def make_options():" in snippet and "opts.Training.gradientAccumulation(" in _text(
        _outputs(nb, 'Path("tinynet_options.py")')
    )
    assert (work / "tinynet-report.html").stat().st_size > 10_000
    assert "verdict: fits" in _html(_outputs(nb, "check = ipu_autotune.estimate("))
    assert (work / "notebook-example.db").exists()


INTERRUPTED_RUN = """
from torch import nn
import ipu_autotune

model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
result = ipu_autotune.tune(model, name="interrupted", batch_size=8, input_shape=(3, 32, 32),
                           num_classes=10, trials=100000, storage={url!r})
print("RESULT", result.interrupted, len(result.records), result.best is not None)
"""


def test_a_kernel_interrupt_stops_after_the_current_trial_and_returns_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupt the kernel (Jupyter's stop button: SIGINT to the kernel) while tune runs in a
    cell."""
    import time

    import workers_helpers as wh
    from jupyter_client.manager import start_new_kernel

    db = tmp_path / "s.db"
    km, kc = start_new_kernel(kernel_name=_kernel_spec(tmp_path, monkeypatch), cwd=str(tmp_path))
    try:
        msg_id = kc.execute(INTERRUPTED_RUN.format(url=f"sqlite:///{db}"))
        deadline = time.monotonic() + 300
        while wh.sqlite_states(db).get("COMPLETE", 0) < 3:
            assert time.monotonic() < deadline, "the cell ran no trials"
            time.sleep(0.25)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=120)
        while (
            reply["parent_header"].get("msg_id") != msg_id
        ):  # start_new_kernel's own requests first
            reply = kc.get_shell_msg(timeout=120)
        printed = []
        while True:
            msg = kc.get_iopub_msg(timeout=30)
            if msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == msg_id:
                printed.append(msg["content"]["text"])
            if (
                msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"
                and msg["parent_header"].get("msg_id") == msg_id
            ):
                break
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", reply["content"]  # no KeyboardInterrupt in the cell
    interrupted, count, fits = "".join(printed).split("RESULT ")[1].split()
    assert interrupted == "True" and 3 <= int(count) < 1000 and fits == "True"
    states = wh.sqlite_states(db)
    assert "RUNNING" not in states and states["COMPLETE"] == int(count)
