"""One numerics answer (issue 43): `estimate`'s FP16 suggestion sets loss scaling, stochastic
rounding and partials from the same gradient statistics `tune` applies, on the main run's
baseline (`resnet101 --batch-size 64`), not the precision move's defaults (1024, on)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from testing import run_cli, sqlite_url

from ipu_autotune.numerics.answer import NumericsAdvice
from ipu_autotune.problem import Config

pytestmark = pytest.mark.slow
MAIN_RUN = ("resnet101", "--batch-size", "64")


def test_estimate_and_tune_give_the_same_numerics_on_the_main_runs_baseline(
    capsys: pytest.CaptureFixture[str], in_tmp: Any
) -> None:
    code, out, err = run_cli(
        capsys,
        "tune",
        *MAIN_RUN,
        "--trials",
        "1",
        "--json",
        "--storage",
        sqlite_url(in_tmp / "s.db"),
    )
    assert code in (0, 3), err
    advice = NumericsAdvice.from_dict(json.loads(out)["numerics"])
    tuned = advice.apply(Config(precision="16.16"))

    code, out, err = run_cli(capsys, "estimate", *MAIN_RUN)
    assert code == 0, err
    text = " ".join(out.split())  # the suggestions wrap at the console's width
    fp16 = re.search(r"precision 16\.16[^:]*:", text)
    assert fp16, out
    suggested = fp16.group(0)
    # each numerics knob: named with tune's value where it differs from the baseline's, else left
    # as it is
    baseline = Config()
    for knob in ("loss_scaling", "stochastic_rounding", "partials"):
        value = getattr(tuned, knob)
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        if value != getattr(baseline, knob):
            assert f"{knob} {shown}" in suggested, (knob, suggested)
        else:
            assert knob not in suggested, (knob, suggested)
    assert "1024" not in suggested
    # and the reasons are printed, the same lines as tune's summary
    from ipu_autotune.numerics.answer import summary_lines

    for line in summary_lines(advice):
        assert " ".join(line.split()) in text
