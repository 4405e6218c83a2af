"""Storage writes per trial: how many times `ipu-autotune tune` writes to the database for
each trial (each write is one SQLite transaction), counted on Optuna's RDB storage.

    python benchmarks/storage_writes.py              # 20 trials of the default run
    python benchmarks/storage_writes.py --trials 60

Prints the count per kind of write and per trial, and the command.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import optuna

#: RDBStorage's write entry points (Optuna's cache wrapper calls the underscored two)
WRITES = ("_create_new_trial", "_set_trial_param", "set_trial_user_attr", "set_trial_system_attr",
          "set_trial_state_values", "record_heartbeat")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    args = ap.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    rdb = optuna.storages.RDBStorage
    for name in WRITES:
        original = getattr(rdb, name)

        def counted(self, *a, _name=name, _original=original, **k):
            counts[_name] += 1
            return _original(self, *a, **k)

        setattr(rdb, name, counted)
    from ipu_autotune.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'w.db'}"
        cli(["resnet101", "--batch-size", "64", "--seed", "0", "--quiet", "--trials", str(args.trials),
             "--storage", url, "--out", str(Path(tmp) / "out")])
        done = len(optuna.load_study(study_name="resnet101-bs64-2ipu-mk2", storage=url)
                   .get_trials(states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)))
    print(f"$ python benchmarks/storage_writes.py --trials {args.trials}   ({done} finished trials)")
    for name in WRITES:
        print(f"{name:>24}: {counts[name]:5d}  ({counts[name] / done:.1f} per trial)")
    total = sum(counts.values())
    print(f"{'all writes':>24}: {total:5d}  ({total / done:.1f} per trial)")


if __name__ == "__main__":
    sys.exit(main())
