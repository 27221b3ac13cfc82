"""`python -m harness.executors.worker`: run one job and report on a private channel.

Reads a `Job` (JSON) on stdin. Writes JSON lines to what was its stdout, which it keeps for itself
(stdout is pointed at stderr first, so that nothing a library prints can pass for a message):
`{"shape": {"key": K, "outcome": {...}}}` for every shape that ran, then `{"done": [evaluation,
...]}`, or `{"error": "one line"}` when the job could not run (a worker environment that differs
from the job's, a bad request). SIGTERM stops the job: its sandboxed children are stopped too.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGTERM, _stop)

    def send(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    from harness.errors import HarnessError
    from harness.executors import Job, check_environment, run_job

    try:
        job = Job.model_validate_json(sys.stdin.read())
        check_environment(job)
        evaluations = run_job(
            job, lambda key, outcome: send({"shape": {"key": key, "outcome": outcome.model_dump()}})
        )
    except (HarnessError, ValueError) as exc:  # ValueError: pydantic's, a malformed job
        send({"error": str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})
        return 2
    send({"done": [evaluation.model_dump() for evaluation in evaluations]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
