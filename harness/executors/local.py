"""One worker process per GPU of this node (`harness tournament --gpus N|all`).

Each GPU gets a long-lived worker process (`python -m harness.executors.worker`) pinned to it with
CUDA_VISIBLE_DEVICES, started as soon as the device is known, so that its imports and CUDA start
overlap the parent's own work and are paid once per tournament, not once per phase. For each
`run`, a thread per GPU takes the next job, sends it to that GPU's worker, and passes the
worker's messages to the caller's thread through one queue. A GPU runs one job at a time, and a
job's timings run one after another, so two timings never share a GPU. Workers never touch the
store: the caller writes what they send back.

On the CPU (`--device cpu`), `--gpus N` runs N workers that share the cores: useful for tests,
never for timings that count.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable

from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import InProcess, Job, ShapeCallback

STOP_GRACE_S = 15.0
LOG_TAIL_CHARS = 2000


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


class GpuWorker:
    """One long-lived worker process pinned to one GPU; runs the jobs it is given, one at a time."""

    def __init__(self, device: str, cuda: bool, check_parallelism: int = 0) -> None:
        self.device = device
        self.log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "harness.executors.worker", *(["--cuda"] if cuda else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": device, **_parallelism_env(check_parallelism)},
            text=True,
            start_new_session=True,  # Ctrl-C reaches the parent only; it stops the workers
        )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, job: Job, events: queue.Queue) -> tuple:
        """Send the job, pass its shape messages on, and return its ("done" | "failed", job, ...)."""
        try:
            self.process.stdin.write(job.model_dump_json() + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return ("failed", job, self._why_gone())
        from pydantic import ValidationError

        from harness.wire import (
            WORKER_MESSAGE,
            ActivityChanged,
            EvaluationDone,
            JobDone,
            JobFailed,
            ShapeDone,
        )

        evaluated: set[int] = set()  # the keys whose evaluation came on its own (EvaluationDone)
        for line in self.process.stdout:
            try:
                message = WORKER_MESSAGE.validate_json(line)
            except ValidationError as exc:  # the channel carries messages only: the worker is broken
                self.stop(grace_s=0)
                reason = exc.errors()[0]["msg"] if exc.errors() else "invalid"
                what = f"a message that does not decode ({reason}): {line[:200].strip()!r}"
                return ("failed", job, f"worker on GPU {self.device} sent {what}")
            if isinstance(message, ShapeDone):
                events.put(("shape", job, message))
            elif isinstance(message, ActivityChanged):
                events.put(("activity", job, message))
            elif isinstance(message, EvaluationDone):
                sent = [request for request in job.requests if request.key == message.key]
                evaluated.update(request.key for request in sent)
                events.put(("evaluated", job.model_copy(update={"requests": sent}), [message.evaluation]))
            elif isinstance(message, JobDone):
                left = [request for request in job.requests if request.key not in evaluated]
                return ("done", job.model_copy(update={"requests": left}), message.evaluations)
            elif isinstance(message, JobFailed):
                return ("failed", job, f"worker on GPU {self.device}: {message.error}")
        return ("failed", job, self._why_gone())

    def _why_gone(self) -> str:
        code = self.process.wait()
        self.log.flush()
        self.log.seek(0)
        tail = self.log.read()[-LOG_TAIL_CHARS:].strip().splitlines()
        last = f": {tail[-1]}" if tail else ""
        return f"worker on GPU {self.device} exited with code {code} without a result{last}"

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Close its input (it ends after the job in progress); SIGTERM after `grace_s`, then
        SIGKILL: the worker stops its sandboxed children on SIGTERM."""
        process = self.process
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass
        self.log.close()


def _parallelism_env(check_parallelism: int) -> dict[str, str]:
    """HARNESS_CHECK_PARALLELISM for a worker, when the parent's share of the node is set."""
    return {"HARNESS_CHECK_PARALLELISM": str(check_parallelism)} if check_parallelism else {}


class GpuWorkers:
    name = "local"
    keeps_children = True  # each worker lives for the whole tournament

    def __init__(self, devices: list[str]) -> None:
        if not devices:
            raise HarnessError("--gpus: no GPU to run on")
        self.devices = devices
        self.slots = len(devices)
        self._in_process = InProcess()
        self._workers: dict[str, GpuWorker] = {}

    @property
    def check_parallelism(self) -> int:
        """Untimed evaluations at once per worker: the setting when given, else (0, automatic)
        this node's cores shared out between the workers."""
        from harness.config import get_settings

        setting = get_settings().check_parallelism
        if setting:
            return setting
        return max(1, len(os.sched_getaffinity(0)) // len(self.devices))

    @classmethod
    def for_gpus(cls, gpus: str, device: str | None = None) -> GpuWorkers:
        """`gpus`: "all" (every visible GPU) or a count. A count above the visible GPUs is an
        error, unless `device` is "cpu": then it names CPU workers (see the module's docstring)."""
        visible = visible_gpus()
        if gpus == "all":
            if not visible:
                raise HarnessError("--gpus all, but torch sees no CUDA GPU here")
            return cls(visible)
        try:
            count = int(gpus)
        except ValueError:
            raise HarnessError(f"--gpus takes a count or 'all', got {gpus!r}") from None
        if count < 1:
            raise HarnessError(f"--gpus must be at least 1, got {count}")
        if count > len(visible) and (visible or device != "cpu"):
            seen = f"only {len(visible)} GPUs are" if visible else "no GPU is"
            hint = "" if visible else " (--device cpu runs that many CPU workers instead)"
            raise HarnessError(f"--gpus {count}, but {seen} visible here{hint}")
        return cls(visible[:count] if visible else [str(index) for index in range(count)])

    def start(self, device: str | None = None) -> None:
        """Start the workers now (they import torch and, for cuda, start CUDA while the caller
        goes on); `run` starts any that are not running."""
        cuda = device != "cpu"
        for gpu in self.devices:
            if gpu not in self._workers or not self._workers[gpu].alive:
                self._workers[gpu] = GpuWorker(gpu, cuda, self.check_parallelism)

    def resolve_device(self, device: str | None) -> str:
        device = self._in_process.resolve_device(device)
        self.start(device)
        return device

    def probe(self, device: str) -> Environment:
        return self._in_process.probe(device)

    def run(
        self,
        jobs: list[Job],
        on_shape: ShapeCallback,
        on_done: Callable[[Job, list], None],
        on_failed: Callable[[Job, str], None],
        on_activity: Callable[[int, str], None] | None = None,
    ) -> None:
        if not jobs:
            return
        self.start(jobs[0].device)
        todo: queue.Queue[Job] = queue.Queue()
        for job in jobs:
            todo.put(job)
        events: queue.Queue[tuple] = queue.Queue()
        threads = [
            threading.Thread(target=self._serve, args=(gpu, todo, events), daemon=True)
            for gpu in self.devices[: len(jobs)]
        ]
        for thread in threads:
            thread.start()
        finished = 0
        try:
            while finished < len(jobs):
                try:
                    kind, job, payload = events.get(timeout=0.5)
                except queue.Empty:
                    continue
                if kind == "shape":
                    on_shape(payload.key, payload.outcome)
                elif kind == "activity":
                    if on_activity is not None:
                        on_activity(payload.key, payload.activity)
                elif kind == "evaluated":
                    on_done(job, payload)  # one evaluation of a job still running
                elif kind == "done":
                    finished += 1
                    on_done(job, payload)
                else:
                    finished += 1
                    on_failed(job, payload)
        except BaseException:
            self._stop_all(grace_s=0)  # interrupted: the jobs in progress are abandoned
            for thread in threads:
                thread.join(timeout=STOP_GRACE_S)
            raise

    def _serve(self, gpu: str, todo: queue.Queue, events: queue.Queue) -> None:
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            worker = self._workers.get(gpu)
            if worker is None or not worker.alive:  # a worker that died is replaced for the next job
                worker = self._workers[gpu] = GpuWorker(gpu, job.device != "cpu", self.check_parallelism)
            events.put(worker.run(job, events))

    def _stop_all(self, grace_s: float) -> None:
        for worker in self._workers.values():
            worker.stop(grace_s)
        self._workers.clear()

    def close(self) -> None:
        self._stop_all(grace_s=STOP_GRACE_S)
