#!/usr/bin/env python3
"""Compile time per revision in two stores of the same revisions: a first (cold-cache) test run
against a `--force` re-run; what the harness's per-code-hash caches saved.

    python benchmarks/compile_reuse.py COLD_STORE FORCED_STORE
"""

from __future__ import annotations

import sqlite3
import sys


def compile_seconds(path: str) -> dict[int, tuple[float, float]]:
    """revision id -> (import/compile s, first checked call s) of its test-mode run."""
    connection = sqlite3.connect(path)
    try:
        runs = connection.execute(
            "select id, revision_id, compile_s from runs where mode = 'test'"
        ).fetchall()
        result = {}
        for run_id, revision_id, compile_s in runs:
            first = connection.execute(
                "select call_s from shape_results where run_id = ? order by id limit 1",
                (run_id,),
            ).fetchone()
            result[revision_id] = (compile_s or 0.0, (first[0] if first and first[0] else 0.0))
        return result
    finally:
        connection.close()


def main() -> None:
    cold, forced = (compile_seconds(path) for path in sys.argv[1:3])
    print(
        f"{'revision':>9} {'cold import s':>14} {'forced import s':>16} {'cold 1st call s':>16} {'forced 1st call s':>18}"
    )
    for revision_id in sorted(set(cold) & set(forced)):
        (a, b), (c, d) = cold[revision_id], forced[revision_id]
        print(f"{revision_id:>9} {a:>14.2f} {c:>16.2f} {b:>16.2f} {d:>18.2f}")
    total = (
        [sum(v[i] for v in cold.values()) for i in (0, 1)],
        [sum(v[i] for v in forced.values()) for i in (0, 1)],
    )
    print(f"{'total':>9} {total[0][0]:>14.2f} {total[1][0]:>16.2f} {total[0][1]:>16.2f} {total[1][1]:>18.2f}")


if __name__ == "__main__":
    main()
