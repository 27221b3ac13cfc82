"""The judge's version: one number for what a stored score and verdict mean (torch-free, read by
the store, the plan and the reports).

Bump JUDGE_VERSION whenever a change to the judge changes what a result means (how inputs are
made, what is checked, how calls are timed or a score computed), and add a line below. Every run
and retiming records the version that produced it (`Run.judge_version`); a result of an older
judge is never ranked beside a newer one (harness.standing.board ranks the newest version of
an environment only) and counts as missing for the plan, so the next tournament runs it again
(harness.store.runs.reuse_or_claim).

1. Every result recorded before the judge kept its version (db/migrations 0006).
2. Issue 28: speedups drawn within one run; the judge records its version.
3. Issues 28 and 33: a call reported far below its shape's others is scored by its bracket; a
   shape flagged `host_clock_mismatch` is timed again (harness.timing, step 6).
4. Issues 28 and 33 (2026-12-03): the revisions timed together get the same inputs for their
   n-th timed call of a block (harness.sandbox.timed_cases); on a GPU the calibration stops at
   0.25 s of calls (five at least), and hidden work beyond the reported call is flagged; cuDNN's and
   cuBLAS's allocation failures count as out of memory (retried).
5. Issues 28 and 33 (2026-12-03): on a GPU the parent flushes the L2 from its own process before
   every timed call and flags a call's prelude (inputs to the go) longer than the calibrated one
   (harness.timing.PRELUDE_MARGIN_MS); a calibration child out of memory is a shape result.
6. Issue 28 (2026-12-06): hidden work is the quietest bracket less the harness cost and the
   fastest report; on the CPU its floor is 5 % of the median report alone (no fixed part); the
   host-clock flag's spread is the excesses' first quartile less their least; on the CPU the
   harness cost is calibrated again for every timed block, the least kept.
7. Issue 28 (2026-12-07): on the CPU every timed block runs with the parent and the child on
   CPUs of their own (harness.sandbox.placement); the parent bounds a timing's warm-up after its
   first call and its timed calls by its own clock (a replaced clock is a `timeout` in seconds,
   not at the phase's limit); the memory watch counts pages that forks share once (workers
   forked after loading torch were `crashed`).
"""

from __future__ import annotations

JUDGE_VERSION = 7
