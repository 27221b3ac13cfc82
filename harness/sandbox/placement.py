"""Where the parent and a child run while the child is timed on the CPU (the kernel's
sched_setaffinity(2)).

On the CPU the parent's bracket of a call (harness.timing, step 6) holds two wake-ups across
processes: the child's, told that its inputs are there, and the parent's, told that the output
is. Whether they are one core's context switch or another core's wake-up is the scheduler's
choice, and it keeps that choice for tens of calls: on the 2-core machine a calibration's
thirty calls of a bare no-op read 0.106-0.115 ms each with the two processes on different cores
and 0.145-0.175 ms on one (2026-12-07, beside two busy loops; every calibration of one shape
in a run could land on one core while a candidate's blocks landed on two). The hidden work the
verdict scores is a candidate's least bracket less the calibration's, so that difference of
placement read a convolution hidden in the NaN fill (its whole bracket 0.03-0.04 ms over the
calibration's on smoke[0]) as none, and the cheat ranked at 45x an honest revision on that shape
(tests/test_adversarial.py, in one run of four beside a second suite).

`placed_apart` pins, for one timed block, the parent's calling thread to one allowed CPU and the
main thread of each of the child's processes (the thread that hears the go and says the call is
over) to the others, and puts both back after. So every block, the calibration's and each
candidate's, is timed with the same placement, the quicker one: a child that moves its own main
thread onto the parent's core lengthens its own brackets only. Its other threads (a thread pool)
keep the whole allowed set. With one allowed CPU there is nothing to choose and nothing is
pinned."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


@contextmanager
def placed_apart(child_pids: Iterable[int]) -> Iterator[None]:
    """For the duration: the calling thread on the least CPU it may use, each of `child_pids`'
    main threads on the other CPUs it may use; each restored after (a process gone meanwhile is
    left alone)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        yield
        return
    parent_cpu = allowed[0]
    moved: list[tuple[int, set[int]]] = []
    try:
        os.sched_setaffinity(0, {parent_cpu})
        moved.append((0, set(allowed)))
        for pid in child_pids:
            try:
                before = os.sched_getaffinity(pid)
                apart = before - {parent_cpu}
                if apart:
                    os.sched_setaffinity(pid, apart)
                    moved.append((pid, before))
            except OSError:  # gone, or not ours to move: left as it is
                continue
        yield
    finally:
        for pid, before in moved:
            try:
                os.sched_setaffinity(pid, before)
            except OSError:
                continue
