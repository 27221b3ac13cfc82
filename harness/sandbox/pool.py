"""The children of this process, as one explicit object (`ChildPool`): those alive, so that a
timed child runs while every other one is stopped; and those made for an evaluation before its
Evaluator exists, by `child_key`, which the Evaluator of the same candidate takes:

- kept: ready, kept after a passing evaluation for the candidate's next phase (`keep_child`);
- early: spawned by `start_early` while the parent imports torch, not yet ready.

A timing must stop every other child of the process, whoever made it, so a process has one pool,
`CHILD_POOL`, which stops its waiting children at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.sandbox.limits import SandboxLimits
    from harness.sandbox.supervisor import ChildProcess
    from harness.tasks import TaskSpec

ChildKey = tuple[str, str, str, str]


def child_key(code_sha256: str, task: str, device: str, limits: SandboxLimits) -> ChildKey:
    """What a sandboxed child is made for: the same candidate, task, device and limits."""
    return (code_sha256, task, device, limits.model_dump_json())


class ChildPool:
    def __init__(self) -> None:
        self.kept: dict[ChildKey, ChildProcess] = {}
        self.early: dict[ChildKey, ChildProcess] = {}
        self.live: set[ChildProcess] = set()  # every child spawned and not yet closed
        self.timing_lock = threading.Lock()  # one timed child at a time in this process

    def start_early(self, wanted: list[tuple[bytes, TaskSpec, str, SandboxLimits]]) -> None:
        """Spawn a child for each (code, task, device, limits) that has no kept or early child
        yet, without waiting: they import torch and their candidates while the caller imports
        torch itself and sets up the evaluations that will take them. A child that dies at once
        is left for its evaluation to start again (and to record why)."""
        from harness.sandbox.supervisor import ChildFailure, ChildProcess

        for code, task, device, limits in wanted:
            key = child_key(hashlib.sha256(code).hexdigest(), task.name, device, limits)
            if key in self.kept or key in self.early:
                continue
            child = ChildProcess(code, task, device=device, limits=limits, code_sha256=key[0], pool=self)
            try:
                child.spawn()
            except ChildFailure:
                child.close()
                continue
            self.early[key] = child

    def take(self, key: ChildKey) -> tuple[ChildProcess | None, ChildProcess | None]:
        """The kept and the early child made for `key` (each None when there is none); they are
        the caller's from now on."""
        return self.kept.pop(key, None), self.early.pop(key, None)

    def close_waiting(self) -> None:
        """Stop every kept or early child that no evaluation took (asked together, then waited
        for)."""
        children = [*self.kept.values(), *self.early.values()]
        self.kept.clear()
        self.early.clear()
        for child in children:
            child.request_shutdown()
        for child in children:
            child.close()

    @contextmanager
    def others_stopped(self, child: ChildProcess) -> Iterator[None]:
        """Stop every other live child (`ChildProcess.stop`: its freezer cgroup, the whole tree at
        once, where one was made; SIGSTOP to each process otherwise and for any the freezer does
        not hold) for the duration, then resume them: no other candidate (kept, spawned early,
        waiting for its turn in a group) runs while `child` is timed."""
        others = [other for other in list(self.live) if other is not child]
        try:
            for other in others:  # every freeze asked for first, then each waited for
                other.stop_begin()
            for other in others:
                other.stop_finish()
            yield
        finally:
            for other in others:
                other.resume()


CHILD_POOL = ChildPool()
atexit.register(CHILD_POOL.close_waiting)
