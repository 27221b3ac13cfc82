"""`python -m harness.executors.worker`: run jobs and report on a private channel.

Reads `Job`s (JSON, one per line) on stdin until it closes; runs each in turn. Writes typed
messages (harness.wire.WorkerMessage, JSON lines) to what was its stdout, which it keeps for
itself (stdout is pointed at stderr first, so that nothing a library prints can pass for a
message): `WorkerReady` once, then per job a `ShapeDone` for every shape that ran, then `JobDone`
with the evaluations, or `JobFailed` (one line) when the job could not run (a worker environment
that differs from the job's, a malformed job). It imports what evaluations need, and starts CUDA
when asked, before reading the first job, so that a worker started early is ready when its first
job comes. SIGTERM stops it: the sandboxed children of the job in progress are stopped too.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGTERM, _stop)

    def send(message: BaseModel) -> None:
        channel.write(message.model_dump_json() + "\n")
        channel.flush()

    from harness.sandbox.isolation import start_isolation_probe

    start_isolation_probe("cuda" if "--cuda" in sys.argv[1:] else "cpu")  # while torch imports
    import harness.sandbox.evaluation  # noqa: F401  (imports torch and the sandbox now)
    from harness.errors import HarnessError
    from harness.executors import Job, check_environment, run_job
    from harness.wire import ActivityChanged, EvaluationDone, JobDone, JobFailed, ShapeDone, WorkerReady

    if "--cuda" in sys.argv[1:]:
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
    send(WorkerReady())
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            job = Job.model_validate_json(line)
            check_environment(job)
            run_job(
                job,
                lambda key, outcome: send(ShapeDone(key=key, outcome=outcome)),
                on_evaluation=lambda request, evaluation: send(
                    EvaluationDone(key=request.key, evaluation=evaluation)
                ),
                on_activity=lambda key, activity: send(ActivityChanged(key=key, activity=activity)),
            )
        except (HarnessError, ValueError) as exc:  # ValueError: pydantic's, a malformed job
            text = str(exc).strip()
            send(JobFailed(error=text.splitlines()[0] if text else type(exc).__name__))
            continue
        send(JobDone(evaluations=[]))  # each was sent as it ended
    return 0


if __name__ == "__main__":
    sys.exit(main())
