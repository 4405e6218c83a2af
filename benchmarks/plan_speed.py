"""How long `ipu-autotune plan` takes, against one `ipu-autotune estimate` of the same model.

Each command runs as a user runs it: a fresh `python -m ipu_autotune` process (imports,
tracing and the numerics answer included), timed on the wall clock. A plan is `tune --ipus N`'s
own search at each of 1 to 64 IPUs (study/planning.py), so it costs several searches; an
estimate is one configuration. Targets (issue 59): a CNN plan under 10 s, a 7B plan under 30 s.

    python benchmarks/plan_speed.py           # ResNet-50 and a Llama-7B config at --seq-len 2048
    python benchmarks/plan_speed.py --quick   # ResNet-18 only
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, header, markdown_table

LLAMA_7B = REPO / "examples" / "hf_configs" / "llama-7b"
#: (name, the problem's flags, target seconds for the plan)
CASES = {
    "resnet50": (["resnet50", "--batch-size", "16"], 10.0),
    "llama-7b": (["hf:llama-7b", "--batch-size", "1", "--seq-len", "2048"], 30.0),
}
QUICK = {"resnet18": (["resnet18", "--batch-size", "8"], 10.0)}


def timed(argv: list[str], cwd: Path) -> tuple[float, str]:
    """Wall seconds of `python -m ipu_autotune ARGV` in a fresh process, and its stdout."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "ipu_autotune", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env=None,
    )
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} failed ({out.returncode}): {out.stderr[-2000:]}")
    return elapsed, out.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ResNet-18 only")
    args = parser.parse_args(argv)
    header("plan speed", "plan_speed.py", sys.argv[1:] if argv is None else argv)
    cases = QUICK if args.quick else CASES
    rows, verdicts, start = [], [], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "llama-7b").symlink_to(LLAMA_7B)
        for name, (problem, target) in cases.items():
            estimate_s, _ = timed(["estimate", *problem, "--json"], cwd)
            plan_s, out = timed(["plan", *problem], cwd)
            rows.append(
                [
                    name,
                    f"{estimate_s:.1f}",
                    f"{plan_s:.1f}",
                    f"{plan_s / estimate_s:.1f}x",
                    f"{target:.0f}",
                    "met" if plan_s < target else "not met",
                ]
            )
            verdicts.append(f"ipu-autotune plan {shlex.join(problem)}")
            print(
                f"  {name}: estimate {estimate_s:.1f} s, plan {plan_s:.1f} s "
                f"({plan_s / estimate_s:.1f}x)",
                flush=True,
            )
            print("\n".join("    " + line for line in out.splitlines()[-3:]), flush=True)
    print("\n## Plan against one estimate (fresh processes, wall clock)\n")
    print(
        markdown_table(
            ["model", "estimate s", "plan s", "plan / estimate", "target s", "target"], rows
        )
    )
    print(
        "\nto reproduce one row: "
        + "; ".join(verdicts)
        + " (from a folder holding llama-7b/config.json, "
        "examples/hf_configs/llama-7b)"
    )
    print(f"\nwall time: {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
