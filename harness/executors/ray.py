"""Jobs as Ray tasks on a cluster (`harness tournament --executor ray [--ray-address ADDRESS]`).

Each job is one Ray task that asks for one GPU (`num_gpus=1`; Ray pins it with
CUDA_VISIBLE_DEVICES). On a cluster without GPUs, `--device cpu` jobs ask for one CPU each instead
and check their revisions one at a time (the interpreter's checks, side by side across the
cluster's CPUs); with GPUs in the cluster, `--device cpu` jobs still ask for a GPU each. The task runs the job as a local worker would (`harness.executors.run_job`:
sandboxed children on that node, the reference computed there) and returns the evaluations to the
driver, which alone writes them to the store. The driver needs no GPU: the device and the
environment are probed by a Ray task on a GPU of the cluster, and every task checks that its node
is that same environment (one tournament runs on one kind of node).

Ray is an optional extra: `pip install 'harness[ray]'`. The harness must be importable on every
node (installed in the cluster's Python environment).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from pydantic import ValidationError

from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import Job, ShapeCallback
from harness.wire import WORKER_MESSAGE, DeviceProbed, JobDone, JobFailed, WorkerMessage

POLL_S = 1.0
NO_GPU = (
    "the Ray cluster has no GPU resource: on cuda each evaluation asks for one GPU "
    "(--device cpu checks on the cluster's CPUs)"
)
CONNECT_TIMEOUT_S = 5.0


def _probe_task(device: str | None) -> str:
    """On a cluster GPU: the device (resolved as locally) and its environment, or an error (a
    harness.wire message as JSON)."""
    from harness.devices import resolve_device
    from harness.environment import probe_environment
    from harness.wire import DeviceProbed, JobFailed

    try:
        resolved = resolve_device(device)
        return DeviceProbed(
            device=resolved, environment=probe_environment(resolved).model_dump()
        ).model_dump_json()
    except HarnessError as exc:
        return JobFailed(error=str(exc)).model_dump_json()


def _job_task(job_json: str, parallel: int | None = None) -> str:
    """On a cluster GPU (or CPU): the job's evaluations, or an error (a harness.wire message as
    JSON). `parallel`: untimed evaluations at once (default: the node's automatic count)."""
    from harness.executors import check_environment, run_job
    from harness.wire import JobDone, JobFailed

    try:
        job = Job.model_validate_json(job_json)
        check_environment(job)
        evaluations = run_job(job, parallel=parallel)
    except HarnessError as exc:
        return JobFailed(error=str(exc)).model_dump_json()
    return JobDone(evaluations=evaluations).model_dump_json()


def _decode(answer: str) -> WorkerMessage:
    """A Ray task's answer; one that does not decode is an error, never skipped."""
    try:
        return WORKER_MESSAGE.validate_json(answer)
    except ValidationError as exc:
        raise HarnessError(f"a Ray task's answer does not decode: {_first_line(exc)}") from None


class RayExecutor:
    name = "ray"
    keeps_children = False  # a Ray task ends with its job

    def __init__(self, address: str | None = None, device: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise HarnessError("--executor ray needs Ray: pip install 'harness[ray]'") from None
        self.ray = ray
        if address not in (None, "auto", "local"):
            _check_reachable(address)
        try:
            if not ray.is_initialized():
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = address or "the default (RAY_ADDRESS, a running local cluster, or a new one)"
            raise HarnessError(f"cannot reach a Ray cluster at {where}: {_first_line(exc)}") from None
        resources = ray.cluster_resources()
        self.gpus, self.cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        self.on_cpus = False  # its tasks ask for CPUs: a cluster without GPUs, --device cpu
        self.slots = max(self.gpus, 1)
        self._probe = ray.remote(num_gpus=1, max_retries=0)(_probe_task)
        self._job = ray.remote(num_gpus=1, max_retries=0)(_job_task)
        self._probed: DeviceProbed | None = None
        if self.gpus < 1 and device != "cpu":
            self.close()
            raise HarnessError(NO_GPU)

    def _probe_cluster(self, device: str | None) -> DeviceProbed:
        if self.gpus < 1 and device != "cpu":
            raise HarnessError(NO_GPU)
        if self.gpus < 1 and not self.on_cpus:
            if self.cpus < 1:
                raise HarnessError("the Ray cluster has neither a GPU nor a CPU resource")
            self.on_cpus, self.slots = True, self.cpus
            self._probe = self._probe.options(num_gpus=0, num_cpus=1)
            self._job = self._job.options(num_gpus=0, num_cpus=1)
        if self._probed is None or device not in (None, self._probed.device):
            answer = _decode(self.ray.get(self._probe.remote(device)))
            if isinstance(answer, JobFailed):
                raise HarnessError(f"on the Ray cluster: {answer.error}")
            if not isinstance(answer, DeviceProbed):
                raise HarnessError(f"on the Ray cluster: a probe answered {answer.type!r}")
            self._probed = answer
        return self._probed

    def resolve_device(self, device: str | None) -> str:
        return self._probe_cluster(device).device

    def probe(self, device: str) -> Environment:
        return Environment.model_validate(self._probe_cluster(device).environment)

    def run(
        self,
        jobs: list[Job],
        on_shape: ShapeCallback,
        on_done: Callable[[Job, list], None],
        on_failed: Callable[[Job, str], None],
        on_activity: Callable[[int, str], None] | None = None,  # a Ray task answers once: not told
    ) -> None:
        ray = self.ray
        parallel = 1 if self.on_cpus else None  # a task on one CPU checks one revision at a time
        pending = {self._job.remote(job.model_dump_json(), parallel): job for job in jobs}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    job = pending.pop(ref)
                    try:
                        answer = _decode(ray.get(ref))
                    except ray.exceptions.RayError as exc:  # a lost node or worker
                        on_failed(job, f"Ray task failed: {_first_line(exc)}")
                        continue
                    except HarnessError as exc:
                        on_failed(job, str(exc))
                        continue
                    if not isinstance(answer, JobDone):
                        error = answer.error if isinstance(answer, JobFailed) else f"answered {answer.type!r}"
                        on_failed(job, f"Ray task: {error}")
                        continue
                    for request, evaluation in zip(job.requests, answer.evaluations):
                        for outcome in evaluation.shapes:
                            if outcome.status != "not_run":
                                on_shape(request.key, outcome)
                    on_done(job, answer.evaluations)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()


def _check_reachable(address: str) -> None:
    """Ray retries an unreachable address for minutes: fail at once instead."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise HarnessError(f"--ray-address {address!r}: expected HOST:PORT (or ray://HOST:PORT)")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise HarnessError(f"cannot reach a Ray cluster at {address}: {exc.strerror or exc}") from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
