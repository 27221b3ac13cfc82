"""Jobs as Ray tasks on a cluster (`harness tournament --executor ray [--ray-address ADDRESS]`).

Each job is one Ray task that asks for one GPU (`num_gpus=1`; Ray pins it with
CUDA_VISIBLE_DEVICES). The task runs the job as a local worker would (`harness.executors.run_job`:
sandboxed children on that node, the reference computed there) and returns the evaluations to the
driver, which alone writes them to the store. The driver needs no GPU: the device and the
environment are probed by a Ray task on a GPU of the cluster, and every task checks that its node
is that same environment (one tournament runs on one kind of node).

Ray is an optional extra: `pip install 'harness[ray]'`. The harness must be importable on every
node (installed in the cluster's Python environment).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

from harness.environment import Environment
from harness.errors import HarnessError
from harness.executors import Job, ShapeCallback

POLL_S = 1.0
CONNECT_TIMEOUT_S = 5.0


def _probe_task(device: str | None) -> dict:
    """On a cluster GPU: the device (resolved as locally) and its environment, or an error."""
    from harness.environment import probe_environment
    from harness.sandbox.evaluation import resolve_device

    try:
        resolved = resolve_device(device)
        return {"device": resolved, "environment": probe_environment(resolved).model_dump()}
    except HarnessError as exc:
        return {"error": str(exc)}


def _job_task(job_json: str) -> str:
    """On a cluster GPU: the job's evaluations (JSON), or an error."""
    from harness.executors import check_environment, run_job

    try:
        job = Job.model_validate_json(job_json)
        check_environment(job)
        evaluations = run_job(job)
    except HarnessError as exc:
        return json.dumps({"error": str(exc)})
    return json.dumps({"done": [evaluation.model_dump() for evaluation in evaluations]})


class RayExecutor:
    name = "ray"
    keeps_children = False  # a Ray task ends with its job

    def __init__(self, address: str | None = None) -> None:
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
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            self.close()
            raise HarnessError("the Ray cluster has no GPU resource: each evaluation asks for one GPU")
        self.slots = gpus
        self._probe = ray.remote(num_gpus=1, max_retries=0)(_probe_task)
        self._job = ray.remote(num_gpus=1, max_retries=0)(_job_task)
        self._probed: dict | None = None

    def _probe_cluster(self, device: str | None) -> dict:
        if self._probed is None or device not in (None, self._probed.get("device")):
            answer = self.ray.get(self._probe.remote(device))
            if "error" in answer:
                raise HarnessError(f"on the Ray cluster: {answer['error']}")
            self._probed = answer
        return self._probed

    def resolve_device(self, device: str | None) -> str:
        return self._probe_cluster(device)["device"]

    def probe(self, device: str) -> Environment:
        return Environment.model_validate(self._probe_cluster(device)["environment"])

    def run(
        self,
        jobs: list[Job],
        on_shape: ShapeCallback,
        on_done: Callable[[Job, list], None],
        on_failed: Callable[[Job, str], None],
    ) -> None:
        from harness.wire import Evaluation

        ray = self.ray
        pending = {self._job.remote(job.model_dump_json()): job for job in jobs}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    job = pending.pop(ref)
                    try:
                        answer = json.loads(ray.get(ref))
                    except (ray.exceptions.RayError, ValueError) as exc:  # a lost node or worker
                        on_failed(job, f"Ray task failed: {_first_line(exc)}")
                        continue
                    if "error" in answer:
                        on_failed(job, f"Ray task: {answer['error']}")
                        continue
                    evaluations = [Evaluation.model_validate(item) for item in answer["done"]]
                    for request, evaluation in zip(job.requests, evaluations):
                        for outcome in evaluation.shapes:
                            if outcome.status != "not_run":
                                on_shape(request.key, outcome)
                    on_done(job, evaluations)
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
