#!/usr/bin/env python3
"""Where a tournament's wall time went, read back from the store it wrote (an estimate: the
parent's own clock, bucket by bucket, is in benchmarks/tournament_overhead.py, which also runs
the tournament, the no-op rerun and the `--force` rerun itself).

For each phase (run mode) of one environment: the phase's wall time (first run claimed to last run
written), split into
- compile and warm-up: the candidates' imports, the warm-up calls before timing, and on timed
  shapes the part of the first call above the shape's median timed call (JIT compilation, Triton
  autotuning, cuDNN's algorithm search). The children of a group (up to 16, in run order) import
  side by side, so a group counts its longest import, not the sum;
- checked calls: the first checked call of each shape (`call_s`, on the child's clock: the call
  alone, neither the input generation nor the output transfer), less the part counted above. In
  the test phase this still includes the first call's compilation. On the CPU, where every
  autotune config is checked, only the first config's call is stored: the others fall in the
  overhead here;
- timed calls: the sum of every timed call's time;
- harness overhead: the rest (process starts, input generation, reference computation, output
  transfer and comparison, the leaderboard recheck, L2 flushes, the store).

With `--gpus N` (a tournament run with `--gpus N`), the wall time counts N times (GPU-seconds):
the work of the workers adds up across GPUs, and the overhead then includes a GPU's idle time
while the other finishes its share.

    python benchmarks/tournament_profile.py [--db URL] [--task conv2d_v2] [--device NAME] [--gpus N]
"""

from __future__ import annotations

import argparse
import statistics

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from harness.store.models import Run
from harness.store.session import open_store

GROUP = 16  # harness.sandbox.evaluation.INTERLEAVE_GROUP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="SQLAlchemy URL of the store (default: settings)")
    parser.add_argument("--task", default="conv2d_v2")
    parser.add_argument("--device", default=None, help="device or device name (default: the latest run's)")
    parser.add_argument("--gpus", type=int, default=1, help="workers the tournament ran with (--gpus N)")
    args = parser.parse_args()

    store = open_store(args.db)
    with store.session() as session:
        runs = session.scalars(
            select(Run)
            .where(Run.task == args.task, Run.state == "done")
            .options(selectinload(Run.shapes))
            .order_by(Run.finished_at)
        ).all()
        if args.device:
            wanted = args.device.lower()
            runs = [r for r in runs if wanted in (r.device.lower(), r.device_name.lower())]
        if not runs:
            raise SystemExit(f"no finished runs of {args.task} in this store")
        env_key = runs[-1].env_key
        runs = [r for r in runs if r.env_key == env_key]
        print(f"{args.task} on {runs[-1].device_name or runs[-1].device}: {len(runs)} runs")
        header = f"{'phase':<13}{'runs':>5}{'wall s' if args.gpus == 1 else 'GPU s':>9}{'compile+warm-up':>17}{'checked calls':>15}"
        print(header + f"{'timed calls':>13}{'overhead':>10}{'overhead %':>12}")
        for mode in dict.fromkeys(r.mode for r in runs):
            phase = [r for r in runs if r.mode == mode]
            wall = (max(r.finished_at for r in phase) - min(r.started_at for r in phase)).total_seconds()
            wall *= args.gpus
            in_order = sorted(phase, key=lambda r: r.id)
            compile_s = sum(
                max((r.compile_s or 0.0 for r in in_order[first : first + GROUP]), default=0.0)
                for first in range(0, len(in_order), GROUP)
            )
            compile_s += sum(s.warmup_s for r in phase for s in r.shapes)
            checked_s = sum(s.call_s or 0.0 for r in phase for s in r.shapes)
            first_call_compile = sum(
                max(0.0, s.call_s - statistics.median(s.times_ms) / 1000)
                for r in phase
                for s in r.shapes
                if s.times_ms and s.call_s
            )
            compile_s += first_call_compile
            checked_s -= first_call_compile
            timed_s = sum(sum(s.times_ms or []) for r in phase for s in r.shapes) / 1000
            overhead = wall - compile_s - checked_s - timed_s
            print(
                f"{mode:<13}{len(phase):>5}{wall:>9.1f}{compile_s:>17.1f}{checked_s:>15.1f}"
                f"{timed_s:>13.1f}{overhead:>10.1f}{overhead / wall * 100 if wall else 0:>11.1f}%"
            )
    store.close()


if __name__ == "__main__":
    main()
