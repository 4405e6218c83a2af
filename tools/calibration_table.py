"""Print docs/estimator.md's table of predicted vs published outcomes for every calibration point.

python tools/calibration_table.py          # every point (docs/estimator.md)
python tools/calibration_table.py --hf     # the transformer points (docs/transformers.md)
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
hf_only = "--hf" in sys.argv[1:]
print("| point | published | predicted | busiest tile (worst IPU) | note |")
print("|---|---|---|---|---|")
for pt in points:
    if hf_only != pt["problem"]["model"].startswith("hf:"):
        continue
    problem, config = Problem.from_dict(pt["problem"]), Config.from_dict(pt["config"])
    m = backend.measure(problem, config)
    worst = max(range(len(m.max_tile_bytes)), key=m.max_tile_bytes.__getitem__)
    tile = f"{m.max_tile_bytes[worst] / m.tile_capacity_bytes:.0%}" + (
        f" (IPU{worst})" if hf_only else ""
    )
    miss = (
        "; known miss"
        if "known_miss" in pt
        else "; layout interpreted, not in the error bars"
        if "interpreted" in pt
        else ""
    )
    if "expect" in pt:
        published, predicted = pt["expect"], "fits" if m.feasible else "oom"
        note = ("right" if published == predicted else "**wrong**") + miss
    elif "throughput" in pt and hf_only:
        # as tests/test_calibration.py compares them: device-side, in published (packed) sequences
        got = m.device_throughput * pt.get("packing_factor", 1.0)
        low, high = pt.get("band", (0.7, 1.4))
        packed = f", x{pt['packing_factor']:g} packed" if "packing_factor" in pt else ""
        published, predicted = f"{pt['throughput']:,.0f} seq/s", f"{got:,.0f} seq/s{packed}"
        note = f"{got / pt['throughput']:.2f}x (band {low:g}-{high:g}){miss}"
    elif "throughput" in pt:
        got = (
            m.device_throughput if pt.get("scope") == "device" else m.throughput
        )  # as the test compares
        published = f"{pt['throughput']:,.0f} samples/s"
        predicted = f"{got:,.0f} samples/s"
        note = f"{got / pt['throughput']:.2f}x (band 0.7-1.4)"
    else:
        rel = pt["relative"]
        fp32 = config.replace(
            precision="32.32", optimizer_state="float", loss_scaling=1.0, stochastic_rounding=False
        )
        ratio = sum(m.required_bytes) / sum(backend.measure(problem, fp32).required_bytes)
        published, predicted = f"ratio {rel['value']}", f"ratio {ratio:.3f}"
        note = f"tolerance ±{rel['tolerance']}"
    print(f"| {pt['id']} | {published} | {predicted} | {tile} | {note} |")
