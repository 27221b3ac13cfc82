"""Standing: where each revision stands, computed in one place. `batch` draws it within one
interleaved run (timings, the speedup against the reference, the comparisons with the reference
and the parent); `board` across a task's revisions in one environment (the leaderboard: statuses,
scores, ranks, flags). The leaderboard, `harness history`, `harness bench` and evolution all read
their standing here; harness.report only renders it.
"""
