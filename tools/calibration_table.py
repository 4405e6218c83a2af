"""Print docs/estimator.md's table of predicted vs published outcomes for every calibration point.

    python tools/calibration_table.py
"""

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from ipu_autotune.backends.estimate import EstimateBackend  # noqa: E402
from ipu_autotune.problem import Config, Problem  # noqa: E402

points = tomllib.loads((ROOT / "tests" / "calibration" / "points.toml").read_text())["point"]
backend = EstimateBackend()
print("| point | published | predicted | busiest tile (worst IPU) | note |")
print("|---|---|---|---|---|")
for pt in points:
    problem, config = Problem.from_dict(pt["problem"]), Config.from_dict(pt["config"])
    m = backend.measure(problem, config)
    tile = f"{max(m.max_tile_bytes) / m.tile_capacity_bytes:.0%}"
    if "expect" in pt:
        published, predicted = pt["expect"], "fits" if m.feasible else "oom"
        note = "right" if published == predicted else "**wrong**"
    elif "throughput" in pt:
        published = f"{pt['throughput']:,.0f} samples/s"
        predicted = f"{m.throughput:,.0f} samples/s"
        note = f"{m.throughput / pt['throughput']:.2f}x (band 0.7-1.4)"
    else:
        rel = pt["relative"]
        fp32 = config.replace(precision="32.32", optimizer_state="float", loss_scaling=1.0, stochastic_rounding=False)
        ratio = sum(m.required_bytes) / sum(backend.measure(problem, fp32).required_bytes)
        published, predicted = f"ratio {rel['value']}", f"ratio {ratio:.3f}"
        note = f"tolerance ±{rel['tolerance']}"
    print(f"| {pt['id']} | {published} | {predicted} | {tile} | {note} |")
