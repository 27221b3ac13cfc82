"""Where evaluations run: in this process, in one worker process per GPU of this node, or as Ray
tasks on a cluster.

The plan (harness.plan) claims runs in the store, turns each claimed run into an
`EvaluationRequest` (everything a worker needs, and nothing of the store), and hands the requests
to an executor in `Job`s: a job is a list of requests evaluated together on one device,
interleaved shape by shape (`run_job`). The executor calls back on the caller's thread for every
shape that ran and for every job that ended; the caller (the parent process) alone writes the
results to the store (harness.plan.phases.evaluate_and_record). Executors know nothing of the
store.

- `InProcess`: one job at a time in this process (`harness test`, `harness bench`, a tournament
  without `--gpus`).
- `GpuWorkers` (`--gpus N|all`): one worker process per GPU, pinned with CUDA_VISIBLE_DEVICES,
  each running one job at a time; so two timings never share a GPU.
- `RayExecutor` (`--executor ray`): each job is a Ray task asking for one GPU (for `--device cpu`
  on a cluster without GPUs: one CPU).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from harness.environment import Environment
from harness.errors import HarnessError
from harness.wire import ShapeOutcome

if TYPE_CHECKING:
    from harness.sandbox.evaluation import Evaluator
    from harness.sandbox.limits import SandboxLimits
    from harness.sandbox.pool import ChildPool
    from harness.wire import Evaluation

ShapeCallback = Callable[[int, ShapeOutcome], None]  # (request key, outcome)
ActivityCallback = Callable[[int, str], None]  # (request key, what it does now: Evaluator.tell)


class EvaluationRequest(BaseModel):
    """One evaluation as a worker receives it. `key` is the claimed run's id; `code` is base64."""

    key: int
    label: str = ""
    code: str
    filename: str
    task: str
    device: str
    mode: str = "test"
    timed: bool = False
    secret_seed: int | None = None
    limits: dict
    rule: dict | None = None
    cost: float = 1.0  # an estimate of its seconds, to share requests out evenly (split_jobs)
    keep_child: bool = False  # keep a passing child for this candidate's next phase (Evaluator)
    # untimed: the shapes an interrupted evaluation of this run kept (the store's partial run),
    # taken over as they are; only the others are evaluated (Evaluator's `resumed`)
    resumed: list[ShapeOutcome] = []
    passes: int | None = None  # blocks of timed calls per shape (None: the Evaluator's default)
    stop_at_failure: bool = False  # stop at the first shape that fails (an evolution's child)
    # the revision's parent's code: its per-code caches seed this one's where still empty (run_job)
    parent_code_sha256: str | None = None
    # an evolution's child: its parent's mean per shape (parameters and seed, JSON), to stop
    # timing a shape early where the child is clearly slower (harness.timing.clearly_slower)
    slower_than: dict[str, float] = {}

    @classmethod
    def make(
        cls,
        key: int,
        code: bytes,
        filename: str,
        task: str,
        *,
        device: str,
        limits: SandboxLimits,
        label: str = "",
        mode: str = "test",
        timed: bool = False,
        secret_seed: int | None = None,
        rule: object | None = None,
        cost: float = 1.0,
        keep_child: bool = False,
        resumed: list[ShapeOutcome] | None = None,
        passes: int | None = None,
        stop_at_failure: bool = False,
        parent_code_sha256: str | None = None,
        slower_than: dict[str, float] | None = None,
    ) -> EvaluationRequest:
        return cls(
            key=key,
            label=label,
            code=base64.b64encode(code).decode("ascii"),
            filename=filename,
            task=task,
            device=device,
            mode=mode,
            timed=timed,
            secret_seed=secret_seed,
            limits=limits.model_dump(),
            rule=dataclasses.asdict(rule) if rule is not None else None,
            cost=cost,
            keep_child=keep_child,
            resumed=resumed or [],
            passes=passes,
            stop_at_failure=stop_at_failure,
            parent_code_sha256=parent_code_sha256,
            slower_than=slower_than or {},
        )

    def evaluator(self, pool: ChildPool | None = None) -> Evaluator:
        from harness.sandbox.evaluation import Evaluator
        from harness.sandbox.limits import SandboxLimits
        from harness.tasks import load_task
        from harness.timing import StoppingRule

        return Evaluator(
            base64.b64decode(self.code),
            self.filename,
            load_task(self.task),
            device=self.device,
            mode=self.mode,
            timed=self.timed,
            secret_seed=self.secret_seed,
            limits=SandboxLimits(**self.limits),
            rule=StoppingRule(**self.rule) if self.rule is not None else None,
            keep_child=self.keep_child,
            pool=pool,
            resumed=self.resumed,
            passes=self.passes,
            stop_at_failure=self.stop_at_failure,
            slower_than=self.slower_than,
        )


class Job(BaseModel):
    """Requests evaluated together on one device. `env_key`: the environment the runs were claimed
    for; a worker whose own environment differs refuses the job (`check_environment`)."""

    device: str
    env_key: str
    requests: list[EvaluationRequest]


class Executor(Protocol):
    name: str
    slots: int  # jobs that run at once
    # whether its jobs run in processes that live on (this one, the GPU workers), so that a
    # phase's children can be kept for the next phase's job (EvaluationRequest.keep_child)
    keeps_children: bool

    def resolve_device(self, device: str | None) -> str: ...

    def probe(self, device: str) -> Environment: ...

    def run(
        self,
        jobs: list[Job],
        on_shape: ShapeCallback,
        on_done: Callable[[Job, list[Evaluation]], None],
        on_failed: Callable[[Job, str], None],
        on_activity: ActivityCallback | None = None,
    ) -> None:
        """Run every job; the callbacks come on the caller's thread. A job whose worker failed
        (not its candidates: those are statuses) goes to `on_failed`; the others go on.
        `on_done` may come several times per job, with the requests whose evaluations ended;
        `on_activity` hears what each evaluation does (building, checking, timing, done) where
        the executor can tell."""
        ...

    def close(self) -> None: ...


class WorkerMismatch(HarnessError):
    """A worker's environment is not the one its job was claimed for."""


def check_environment(job: Job) -> Environment:
    from harness.environment import probe_environment

    environment = probe_environment(job.device)
    if environment.env_key != job.env_key:
        raise WorkerMismatch(
            f"worker environment differs from the tournament's ({environment.device_name}, torch "
            f"{environment.torch}, triton {environment.triton}): one tournament runs on one kind of node"
        )
    return environment


def seed_parent_caches(requests: list[EvaluationRequest]) -> None:
    """Before any child of the job starts: each request whose revision has a parent gets its
    parent's per-code caches (compiled kernels, extensions, graphs) where its own are still empty
    (harness.sandbox.workspace.seed_code_caches), so that what a child shares byte for byte with
    its parent is not compiled again (issue 31)."""
    from harness.sandbox.workspace import seed_code_caches

    for request in requests:
        if request.parent_code_sha256:
            code_sha256 = hashlib.sha256(base64.b64decode(request.code)).hexdigest()
            seed_code_caches(code_sha256, request.parent_code_sha256)


def run_job(
    job: Job,
    on_shape: ShapeCallback | None = None,
    pool: ChildPool | None = None,
    on_evaluation: Callable[[EvaluationRequest, Evaluation], None] | None = None,
    on_activity: ActivityCallback | None = None,
    parallel: int | None = None,
) -> list[Evaluation]:
    """Evaluate the job's requests in this process: the untimed ones side by side, the timed ones
    interleaved shape by shape (harness.sandbox.evaluation.evaluate_interleaved). Children kept in
    the pool (default: this process's, harness.sandbox.pool) by an earlier job (an earlier phase)
    are adopted by the requests of the same candidates; the others are stopped before anything
    runs. The first children (a group of timed ones, or as many untimed ones as run at once) are
    spawned before anything imports torch here (harness.sandbox.supervisor is free of it), so that
    this process's own torch import, when it is the first, overlaps their start; on CUDA this
    process makes its CUDA context first (`hold_cuda_context`: a child may take the GPU's memory). `on_evaluation`
    hears of each evaluation as it ends (on this thread), before the job is over; `on_activity`
    of what each does (harness.sandbox.evaluation.ACTIVITIES). `parallel`: untimed evaluations at
    once (default: settings.check_parallelism)."""
    from harness.sandbox.devices import INTERLEAVE_GROUP, check_parallelism
    from harness.sandbox.limits import SandboxLimits
    from harness.sandbox.pool import CHILD_POOL
    from harness.tasks import load_task

    pool = pool or CHILD_POOL
    if any(request.device == "cuda" for request in job.requests):
        from harness.sandbox.devices import hold_cuda_context

        hold_cuda_context()  # before any child of this job can take the GPU's memory
    seed_parent_caches(job.requests)
    timed = any(request.timed for request in job.requests)
    count = check_parallelism() if parallel is None else max(1, parallel)
    ahead = INTERLEAVE_GROUP if timed or count == 1 else count
    try:
        pool.start_early(
            [
                (base64.b64decode(r.code), load_task(r.task), r.device, SandboxLimits(**r.limits))
                for r in job.requests[:ahead]
            ]
        )
        from harness.sandbox.evaluation import evaluate_interleaved

        evaluators = []
        try:
            for request in job.requests:
                evaluators.append(request.evaluator(pool))
        except BaseException:
            for evaluator in evaluators:
                evaluator.close()
            raise
    finally:
        pool.close_waiting()
    requests = {id(evaluator): request for evaluator, request in zip(evaluators, job.requests)}

    def shape_done(evaluator: Evaluator, outcome: ShapeOutcome) -> None:
        if on_shape is not None:
            on_shape(requests[id(evaluator)].key, outcome)

    def evaluated(evaluator: Evaluator, evaluation: Evaluation) -> None:
        if on_evaluation is not None:
            on_evaluation(requests[id(evaluator)], evaluation)

    def activity(evaluator: Evaluator, now: str) -> None:
        if on_activity is not None:
            on_activity(requests[id(evaluator)].key, now)

    return evaluate_interleaved(
        evaluators, shape_done, parallel=parallel, on_evaluation=evaluated, on_activity=activity
    )


def split_jobs(
    device: str,
    env_key: str,
    requests: list[EvaluationRequest],
    slots: int,
    family_of: Mapping[int, object] | None = None,
) -> list[Job]:
    """At most `slots` jobs of near-equal estimated cost: the costliest first, each to the job with
    the least so far (longest processing time first); each job keeps the requests' order.
    `family_of` (request key -> family): the requests of one family go to one job together (a
    timed phase's children of one parent, compared with it in one interleaved run); a request
    without one is a family of its own."""
    families: dict[object, list[int]] = {}
    for index, request in enumerate(requests):
        family = (family_of or {}).get(request.key, ("alone", index))
        families.setdefault(family, []).append(index)
    blocks = list(families.values())
    cost = [sum(requests[i].cost for i in block) for block in blocks]
    count = max(1, min(slots, len(blocks)))
    totals = [0.0] * count
    assigned: list[list[int]] = [[] for _ in range(count)]
    for block in sorted(range(len(blocks)), key=lambda b: (-cost[b], blocks[b][0])):
        job = min(range(count), key=lambda j: (totals[j], j))
        totals[job] += cost[block]
        assigned[job].extend(blocks[block])
    return [
        Job(device=device, env_key=env_key, requests=[requests[i] for i in sorted(indices)])
        for indices in assigned
        if indices
    ]


class InProcess:
    """Jobs one after another in this process; a worker failure is an exception, as before."""

    name = "local"
    slots = 1
    keeps_children = True

    def resolve_device(self, device: str | None) -> str:
        from harness.devices import resolve_device

        return resolve_device(device)

    def probe(self, device: str) -> Environment:
        from harness.environment import probe_environment

        return probe_environment(device)

    def run(self, jobs, on_shape, on_done, on_failed, on_activity=None) -> None:
        """Each evaluation is handed to `on_done` as it ends, as a job of its own request: an
        interrupted job loses none that ended."""
        for job in jobs:
            run_job(
                job,
                on_shape,
                on_evaluation=lambda request, evaluation, job=job: on_done(
                    job.model_copy(update={"requests": [request]}), [evaluation]
                ),
                on_activity=on_activity,
            )

    def close(self) -> None:
        if "harness.sandbox.pool" in sys.modules:
            from harness.sandbox.pool import CHILD_POOL

            CHILD_POOL.close_waiting()


def make_executor(
    executor: str = "local",
    *,
    gpus: str | None = None,
    ray_address: str | None = None,
    device: str | None = None,
) -> Executor:
    """`local` (with `gpus`: one worker per GPU, "all" or a count; CPU workers with device "cpu")
    or `ray` (`device`, when given, is checked against the cluster's resources at once)."""
    if executor == "local":
        if gpus is None:
            return InProcess()
        from harness.executors.local import GpuWorkers

        return GpuWorkers.for_gpus(gpus, device)
    if executor == "ray":
        if gpus is not None:
            raise HarnessError("--gpus is for the local executor; Ray gives each job one GPU of the cluster")
        from harness.executors.ray import RayExecutor

        return RayExecutor(ray_address, device)
    raise HarnessError(f"unknown executor {executor!r}: use local or ray")
