"""One worker process per GPU of this node (`harness tournament --gpus N|all`).

Each GPU gets a thread here that takes the next job, runs it in a fresh worker process
(`python -m harness.executors.worker`) pinned to that GPU with CUDA_VISIBLE_DEVICES, and passes
the worker's messages to the caller's thread through one queue. A GPU runs one job at a time, and a
job's timings run one after another, so two timings never share a GPU. Workers never touch the
store: the caller writes what they send back.

On the CPU (`--device cpu`), `--gpus N` runs N workers that share the cores: useful for tests,
never for timings that count.
"""

from __future__ import annotations

import json
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


class GpuWorkers:
    name = "local"

    def __init__(self, devices: list[str]) -> None:
        if not devices:
            raise HarnessError("--gpus: no GPU to run on")
        self.devices = devices
        self.slots = len(devices)
        self._in_process = InProcess()

    @classmethod
    def for_gpus(cls, gpus: str) -> GpuWorkers:
        """`gpus`: "all" (every visible GPU) or a count. A count above the visible GPUs is an error
        on a GPU node; with no GPU at all it names CPU workers (see the module's docstring)."""
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
        if visible and count > len(visible):
            raise HarnessError(f"--gpus {count}, but only {len(visible)} GPUs are visible here")
        return cls(visible[:count] if visible else [str(index) for index in range(count)])

    def resolve_device(self, device: str | None) -> str:
        return self._in_process.resolve_device(device)

    def probe(self, device: str) -> Environment:
        return self._in_process.probe(device)

    def run(
        self,
        jobs: list[Job],
        on_shape: ShapeCallback,
        on_done: Callable[[Job, list], None],
        on_failed: Callable[[Job, str], None],
    ) -> None:
        from harness.sandbox.evaluation import Evaluation, ShapeOutcome

        todo: queue.Queue[Job] = queue.Queue()
        for job in jobs:
            todo.put(job)
        events: queue.Queue[tuple] = queue.Queue()
        stopping = threading.Event()
        processes: dict[str, subprocess.Popen] = {}
        threads = [
            threading.Thread(
                target=self._serve, args=(device, todo, events, stopping, processes), daemon=True
            )
            for device in self.devices[: len(jobs)]
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
                    on_shape(payload["key"], ShapeOutcome.model_validate(payload["outcome"]))
                elif kind == "done":
                    finished += 1
                    on_done(job, [Evaluation.model_validate(item) for item in payload])
                else:
                    finished += 1
                    on_failed(job, payload)
        finally:
            stopping.set()
            for process in list(processes.values()):
                _stop(process)
            for thread in threads:
                thread.join(timeout=STOP_GRACE_S)

    def close(self) -> None:
        pass

    def _serve(self, device, todo, events, stopping, processes) -> None:
        while not stopping.is_set():
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            outcome = self._run_one(device, job, events, stopping, processes)
            events.put(outcome)

    def _run_one(self, device, job, events, stopping, processes) -> tuple:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": device}
        with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "harness.executors.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                text=True,
                start_new_session=True,  # Ctrl-C reaches the parent only; it stops the workers
            )
            processes[device] = process
            try:
                process.stdin.write(job.model_dump_json())
                process.stdin.close()
            except BrokenPipeError:
                pass
            result = None
            for line in process.stdout:
                try:
                    message = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if "shape" in message:
                    events.put(("shape", job, message["shape"]))
                elif "done" in message:
                    result = ("done", job, message["done"])
                elif "error" in message:
                    result = ("failed", job, f"worker on GPU {device}: {message['error']}")
            code = process.wait()
            processes.pop(device, None)
            if result is not None:
                return result
            log.seek(0)
            tail = log.read()[-LOG_TAIL_CHARS:].strip().splitlines()
            last = tail[-1] if tail else ""
            why = "stopped" if stopping.is_set() else f"exited with code {code}"
            return ("failed", job, f"worker on GPU {device} {why} without a result" + (f": {last}" if last else ""))


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM (the worker stops its sandboxed children), then SIGKILL after a grace period."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass

