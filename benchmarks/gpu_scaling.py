#!/usr/bin/env python3
"""The seed tournament on 1 GPU against N GPUs: wall times and the ratio (issue 7's target: at
least 1.8 times as fast on 2 GPUs).

Each count runs `harness tournament --device cuda --gpus COUNT` on its own copy of a store that
holds the registered seeds and no runs, so both do the same work. Run a warm-up tournament first
(any store) so that neither count pays for compiling: Triton and torch-extension builds are cached
per code hash. Figures are appended to `--record` (JSON lines), so the counts can run in separate
calls; every call prints the table of what the record holds so far.

    python benchmarks/gpu_scaling.py --seeded out/seeded.sqlite --gpus 1 --record out/scaling.jsonl
    python benchmarks/gpu_scaling.py --seeded out/seeded.sqlite --gpus 2 --record out/scaling.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def run_count(seeded: Path, gpus: int, budget: float, mode: str, workdir: Path) -> dict:
    store = workdir / f"scaling-{gpus}gpu.sqlite"
    shutil.copyfile(seeded, store)
    log = workdir / f"scaling-{gpus}gpu.log"
    command = [
        sys.executable,
        "-m",
        "harness",
        "tournament",
        "--device",
        "cuda",
        "--gpus",
        str(gpus),
        "--mode",
        mode,
        "--budget",
        str(budget),
    ]
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(
            command,
            env={**os.environ, "HARNESS_DB": f"sqlite:///{store}"},
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    wall = time.perf_counter() - started
    phases = [line.strip() for line in log.read_text().splitlines() if " revisions, " in line]
    return {
        "gpus": gpus,
        "wall_s": round(wall, 1),
        "exit": done.returncode,
        "mode": mode,
        "budget_s": budget,
        "phases": phases,
        "log": str(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeded", type=Path, required=True, help="a store with the seeds registered, no runs"
    )
    parser.add_argument("--gpus", type=int, nargs="+", required=True, help="GPU counts to run, in order")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of timed calls per shape")
    parser.add_argument("--mode", default="benchmark")
    parser.add_argument("--record", type=Path, required=True, help="JSON lines file the figures go to")
    args = parser.parse_args()

    for gpus in args.gpus:
        result = run_count(args.seeded, gpus, args.budget, args.mode, args.record.parent)
        with args.record.open("a") as record:
            record.write(json.dumps(result) + "\n")
        print(
            f"{gpus} GPU(s): {result['wall_s']} s, exit {result['exit']}; " + "; ".join(result["phases"]),
            flush=True,
        )

    results = [json.loads(line) for line in args.record.read_text().splitlines() if line.strip()]
    base = next((r for r in results if r["gpus"] == 1 and r["exit"] == 0), None)
    print(f"\n{'GPUs':>4} {'wall s':>8} {'speedup vs 1 GPU':>17}")
    for result in results:
        ratio = f"{base['wall_s'] / result['wall_s']:.2f}x" if base and result["exit"] == 0 else "-"
        print(f"{result['gpus']:>4} {result['wall_s']:>8.1f} {ratio:>17}")


if __name__ == "__main__":
    main()
