"""One phase over a list of revisions: reuse, claim, dispatch, record, settle.

For each revision: its finished run in this environment is reused (unless forced, or the task's
shapes changed), or its run is claimed in the store (committed) and becomes an
`EvaluationRequest` (everything a worker needs, nothing of the store), or another worker holds the
claim. The requests go to an executor (harness.executors: this process, one worker per GPU, or
Ray), the untimed ones side by side and the timed ones interleaved shape by shape; each
evaluation is written as it ends, one transaction each (a Ray job's together, as the job ends:
`evaluate_and_record`). An untimed evaluation also keeps each finished shape as it lands
(harness.store.runs.record_shape), so that an interrupted one resumes: its claim is released as a
partial run, and the next phase over that revision evaluates only the shapes still missing. A
timed evaluation is kept whole or not at all: its timings are compared with the reference's
within one interleaved run, and a verdict is never drawn across two. Then each revision
settles: its run, a worker that took the claim over, or its own worker's failure (not the
candidate's: a failing or hostile candidate is a status in its run).

A comparison is drawn within one run only. So when a timed phase evaluates anything, the
revisions its results are compared with join its jobs (interleaved runs): the task's reference
every job, each parent the jobs of its children (a parent's children share one job). One evaluated in that job
anyway is timed there as it is; one whose stored run is reused is timed again beside them, as a
`Retiming` of that job's batch (its stored run, and so its ranked score, stays as it was).
A revision whose parent has no timed result of its own is compared with none.

What differs between phases is data (`Phase`): whether shapes are timed, the seed policy (public
seeds, or the store's secret seed combined with the code), the run kind the store keys runs by,
and which earlier runs estimate a revision's cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sqlalchemy.orm import Session

from harness.config import get_settings, sqlite_directory
from harness.devices import default_shape_set
from harness.environment import Environment
from harness.executors import EvaluationRequest, Executor, split_jobs
from harness.judge import JUDGE_VERSION
from harness.sandbox.limits import SandboxLimits
from harness.store.models import RetimedShape, Retiming, Revision, Run
from harness.store.revisions import get_or_create_secret, get_revision, revision_code
from harness.store.runs import (
    TIME_LIMITS,
    discard_shapes,
    estimated_cost,
    find_run,
    judged_before,
    new_batch,
    passing_shape_means,
    record_run,
    record_shape,
    release_claim,
    resumable_outcomes,
    reuse_or_claim,
)
from harness.store.session import Store, postgres_socket_directories
from harness.tasks import load_task, revision_secret

if TYPE_CHECKING:
    from harness.executors import Job
    from harness.timing import StoppingRule
    from harness.wire import Evaluation, ShapeOutcome

LEADERBOARD_SECRET = "leaderboard_seed"
SeedPolicy = Literal["test", "leaderboard"]  # public seeds, or the secret seed (the Evaluator's `mode`)

# A claim lasts the child's start and import, then per shape this many call time limits (the
# checked calls: every sampled autotune config) and, when timed, the shape's timing budget; a timed
# phase's claim has this margin more (its warm-up, the parent's checks of every timed output).
CLAIM_CALLS_PER_SHAPE = 16
TIMED_CLAIM_MARGIN = 4


@dataclass(frozen=True)
class Phase:
    """What a phase does. `run_kind` is the key the store keeps its runs under (Run.mode)."""

    run_kind: str
    seed_policy: SeedPolicy
    timed: bool
    cost_sources: tuple[str, ...]  # run kinds whose finished runs estimate a revision's cost


_CHECK_COSTS = ("test", "test-leaderboard", "benchmark", "leaderboard")
CHECK_PHASES = {  # harness test --mode
    "test": Phase("test", "test", timed=False, cost_sources=_CHECK_COSTS),
    "leaderboard": Phase("test-leaderboard", "leaderboard", timed=False, cost_sources=_CHECK_COSTS),
}
TIMED_PHASES = {  # harness bench --mode, and the tournament's timed phases
    "benchmark": Phase("benchmark", "test", timed=True, cost_sources=("benchmark", "test")),
    "leaderboard": Phase(
        "leaderboard", "leaderboard", timed=True, cost_sources=("leaderboard", "benchmark", "test")
    ),
}


def claim_ttl_s(limits: SandboxLimits, shape_count: int, rule: StoppingRule | None = None) -> float:
    """How long a claim holds before another worker may take the run over (the one claim-TTL rule:
    see CLAIM_CALLS_PER_SHAPE); `rule`: the timed phase's stopping rule."""
    per_shape_s = limits.call_timeout_s * CLAIM_CALLS_PER_SHAPE + (rule.budget_s if rule is not None else 0.0)
    margin = TIMED_CLAIM_MARGIN if rule is not None else 1
    return limits.startup_timeout_s + limits.import_timeout_s + per_shape_s * shape_count * margin


@dataclass
class PlannedRevision:
    """One revision in a phase, and what became of it."""

    revision_id: int
    label: str  # "lineage rN"
    task: str
    parent_id: int | None = None
    is_reference: bool = False  # the task's reference revision, joined to a timed phase
    run: Run | None = None  # None when another worker holds the claim (or its worker failed)
    reused: bool = False
    busy_with: str = ""
    failed: bool = False  # the worker that evaluated it failed (not the candidate): no result
    run_id: int | None = None  # the run claimed here
    shape_count: int = 0
    resumed: int = 0  # shapes taken over from an interrupted evaluation of its run
    # timed phases: against the reference and the parent (harness.plan.bench)
    speedup: float | None = None  # reference score / score
    vs_reference: str | None = None  # scoring.compare verdict
    vs_parent: str | None = None
    speedup_note: str | None = None  # why there is no speedup (harness.standing.batch.NO_REFERENCE_IN_RUN)
    flags: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, revision: Revision, *, is_reference: bool = False) -> PlannedRevision:
        return cls(
            revision_id=revision.id,
            label=revision.label,
            task=revision.task,
            parent_id=revision.parent_id,
            is_reference=is_reference,
        )

    def stored_or_busy(self) -> str:
        return f"busy ({self.busy_with})" if self.run is None else f"{self.run.status} (stored)"


@dataclass
class PhaseListener:
    """What a phase tells its caller, revision by revision (each on the caller's thread)."""

    not_dispatched: Callable[[PlannedRevision], None] = lambda item: None  # reused, or busy elsewhere
    shape_done: Callable[[PlannedRevision, ShapeOutcome], None] = lambda item, outcome: None
    recorded: Callable[[PlannedRevision, Evaluation], None] = lambda item, evaluation: None
    # what a revision's evaluation does now (building, checking, timing, waiting, done), where told
    activity: Callable[[PlannedRevision, str], None] = lambda item, activity: None
    worker_failed: Callable[[PlannedRevision], None] = lambda item: None
    # the claimed revisions of one job (one interleaved run), once every evaluation of it, the
    # companions' included, is written or its worker failed (in that order)
    job_recorded: Callable[[list[PlannedRevision]], None] = lambda items: None
    # the shape evaluations dispatched, once known: the claimed revisions' and the companions'
    # timed beside them in every job (a revision reused or held elsewhere is not among them)
    dispatching: Callable[[int], None] = lambda shapes: None


def store_limits(store: Store, limits: SandboxLimits) -> SandboxLimits:
    """`limits` with the store hidden from the child too: a SQLite file's directory, or the unix
    socket directories of a PostgreSQL server (harness.store.session.postgres_socket_directories;
    a socket under /tmp is hidden with /tmp by the supervisor)."""
    url = store.engine.url
    store_dir = sqlite_directory(url.render_as_string(hide_password=False))
    hidden = [store_dir] if store_dir is not None else postgres_socket_directories(url)
    if not hidden:
        return limits
    return limits.model_copy(update={"hidden_paths": [*limits.hidden_paths, *hidden]})


def leaderboard_seed(session: Session, revision: Revision) -> int:
    """The revision's secret seed (the store's secret, combined with its code)."""
    return revision_secret(get_or_create_secret(session, LEADERBOARD_SECRET), revision.code_sha256)


@dataclass
class PhaseRun:
    """Where and how a phase runs: the same for every phase of one command or tournament."""

    store: Store
    executor: Executor
    environment: Environment
    limits: SandboxLimits  # with the store hidden (store_limits)
    worker: str
    force: bool = False
    rule: StoppingRule | None = None  # timed phases
    # checks stop at a revision's first failing shape (an evolution's children: issue 31)
    stop_at_failure: bool = False
    # a timed revision clearly slower than its parent on a shape (the parent's stored run of the
    # same kind and environment) stops timing it early (an evolution's children: issue 31)
    stop_when_slower: bool = False

    def run(
        self,
        phase: Phase,
        items: list[PlannedRevision],
        listener: PhaseListener | None = None,
        *,
        keep_children: bool = False,
    ) -> None:
        """Claim, dispatch, record and settle `items` (distinct revisions, in order) for `phase`.
        `keep_children`: a timed phase follows on the same executor, which may keep the children
        that passed for it (EvaluationRequest.keep_child)."""
        listener = listener or PhaseListener()
        requests: dict[int, EvaluationRequest] = {}
        claimed: dict[int, PlannedRevision] = {}
        not_dispatched: list[PlannedRevision] = []
        with self.store.session() as session:
            for item in items:
                request = self._claim(session, phase, item)
                if request is None:
                    not_dispatched.append(item)
                    continue
                if keep_children and getattr(self.executor, "keeps_children", False):
                    request.keep_child = True
                requests[request.key] = request
                claimed[request.key] = item
            companions = self._companions(session, phase, items, claimed) if phase.timed and claimed else []
        for item in not_dispatched:  # after the claims' transaction: a listener may write to the store
            listener.not_dispatched(item)
        joined: dict[int, PlannedRevision] = {}  # a companion's request key in a job -> its item

        def item_of(key: int) -> PlannedRevision:
            return claimed[key] if key in claimed else joined[key]

        dispatched = evaluate_and_record(
            self.store,
            self.executor,
            self.environment,
            list(requests.values()),
            worker=self.worker,
            on_shape=lambda key, outcome: listener.shape_done(item_of(key), outcome),
            on_recorded=lambda request, evaluation: listener.recorded(claimed[request.key], evaluation),
            on_activity=lambda key, activity: listener.activity(item_of(key), activity),
            on_job_recorded=lambda keys: listener.job_recorded([claimed[key] for key in keys]),
            family_of={
                key: item.parent_id
                for key, item in claimed.items()
                if phase.timed and item.parent_id is not None
            },
            on_dispatch=listener.dispatching,
            companions=Companions(
                phase.run_kind,
                [(item.revision_id, request) for item, request in companions],
                {key: item.revision_id for key, item in claimed.items()},
                needed_by={
                    item.revision_id: {
                        key for key, other in claimed.items() if other.parent_id == item.revision_id
                    }
                    for item, _ in companions
                    if not item.is_reference
                },
                joined_as=lambda key, revision_id: joined.__setitem__(
                    key, next(item for item, _ in companions if item.revision_id == revision_id)
                ),
            )
            if companions
            else None,
        )
        for key, item in claimed.items():
            if key in dispatched.failed:
                item.busy_with, item.failed = f"no result: {dispatched.failed[key]}", True
                listener.worker_failed(item)
                continue
            item.run = dispatched.recorded.get(key)
            if item.run is None:
                item.busy_with = "a worker that took over"

    def _companions(
        self,
        session: Session,
        phase: Phase,
        items: list[PlannedRevision],
        claimed: dict[int, PlannedRevision],
    ) -> list[tuple[PlannedRevision, EvaluationRequest]]:
        """The revisions to time beside the claimed ones in every job (module docstring): the
        task's reference and each claimed revision's parent, with a passing timed run of this
        phase's kind in this environment, by this judge; their requests' keys are placeholders
        (`evaluate_and_record` gives each job's its own)."""
        evaluated = {item.revision_id for item in claimed.values()}
        wanted: dict[int, PlannedRevision] = {}
        for item in items:
            if item.is_reference:
                wanted.setdefault(item.revision_id, item)
        for item in claimed.values():
            if item.parent_id is not None and item.parent_id not in wanted:
                known = next((other for other in items if other.revision_id == item.parent_id), None)
                wanted[item.parent_id] = known or PlannedRevision.of(get_revision(session, item.parent_id))
        companions = []
        for revision_id, item in wanted.items():
            run = item.run
            if run is None and revision_id not in evaluated:
                run = find_run(session, revision_id, item.task, phase.run_kind, self.environment.env_key)
            stored_pass = (
                run is not None
                and run.status == "pass"
                and run.score_ms is not None
                and not judged_before(run)
            )
            if revision_id in evaluated or stored_pass:  # a failing or untimed one has no timing to compare
                companions.append((item, self._request(session, phase, item, key=0)))
        return companions

    def _request(
        self,
        session: Session,
        phase: Phase,
        item: PlannedRevision,
        *,
        key: int,
        cost: float | None = None,
        resumed: list[ShapeOutcome] | None = None,
    ) -> EvaluationRequest:
        revision = get_revision(session, item.revision_id)
        task = load_task(item.task)
        secret_seed = leaderboard_seed(session, revision) if phase.seed_policy == "leaderboard" else None
        if cost is None:
            cost = estimated_cost(
                session, item.revision_id, task.name, self.environment.env_key, prefer=phase.cost_sources
            )
        return EvaluationRequest.make(
            key,
            revision_code(revision),
            revision.filename,
            task.name,
            device=self.environment.device,
            limits=self.limits,
            label=item.label,
            mode=phase.seed_policy,
            timed=phase.timed,
            secret_seed=secret_seed,
            rule=self.rule if phase.timed else None,
            cost=cost,
            resumed=resumed,
            stop_at_failure=self.stop_at_failure and not phase.timed,
            parent_code_sha256=(
                revision.parent.code_sha256
                if revision.parent is not None and get_settings().child_shortcuts
                else None
            ),
            slower_than=self._slower_than(session, phase, item, revision),
        )

    def _slower_than(
        self, session: Session, phase: Phase, item: PlannedRevision, revision: Revision
    ) -> dict[str, float] | None:
        """The parent's means by shape key, where a timed revision stops timing a shape on which it
        is clearly slower (`stop_when_slower`; not the reference, which is every speedup's yardstick)."""
        if not (self.stop_when_slower and phase.timed) or item.is_reference or revision.parent is None:
            return None
        return passing_shape_means(
            session, revision.parent.id, item.task, phase.run_kind, self.environment.env_key
        )

    def _claim(self, session: Session, phase: Phase, item: PlannedRevision) -> EvaluationRequest | None:
        """Reuse the stored run, or claim the key and make the item's request (its key: the run's
        id); None when there is nothing to evaluate (reused, or another worker holds the claim)."""
        task = load_task(item.task)
        shape_set = default_shape_set(self.environment.device, timed=phase.timed)
        item.shape_count = len(task.shapes(shape_set))
        rule = self.rule if phase.timed else None
        cost = estimated_cost(
            session, item.revision_id, task.name, self.environment.env_key, prefer=phase.cost_sources
        )
        found = reuse_or_claim(
            session,
            item.revision_id,
            task,
            phase.run_kind,
            self.environment,
            shape_set=shape_set,
            worker=self.worker,
            ttl_s=claim_ttl_s(self.limits, item.shape_count, rule),
            force=self.force,
            limits=self.limits.model_dump(include=set(TIME_LIMITS)),
        )
        if found.run is None or found.reused:
            item.run, item.reused, item.busy_with = found.run, found.reused, found.busy_with
            return None
        item.run_id, item.run = found.run.id, None
        resumed = []
        if self.force or judged_before(found.run):
            discard_shapes(session, found.run)
        elif not phase.timed:
            resumed = resumable_outcomes(session, found.run, task, shape_set)
        item.resumed = len(resumed)
        return self._request(session, phase, item, key=found.run.id, cost=cost, resumed=resumed)


@dataclass
class Companions:
    """Revisions timed beside the claimed requests in the jobs that lack and need them (the
    module docstring): (revision id, request) each, its key replaced by a negative one per job; their
    evaluations become `Retiming`s of the job's batch under `run_kind`. `evaluated`: the
    revision id of each claimed request's key; `joined_as` hears (key in a job, revision id)."""

    run_kind: str
    requests: list[tuple[int, EvaluationRequest]]
    evaluated: dict[int, int]
    # companion revision id -> the claimed keys it is compared with (a parent: its children's);
    # one not here (the reference) joins every job
    needed_by: dict[int, set[int]] = field(default_factory=dict)
    joined_as: Callable[[int, int], None] = lambda key, revision_id: None

    def join(self, jobs: list[Job]) -> dict[int, int]:
        """Each job with the companions it does not evaluate anyway and compares with (the
        reference, the parents of its revisions), first in its order (so that they are timed
        shape by shape beside the rest); returns key -> revision id of each added."""
        added: dict[int, int] = {}
        for job in jobs:
            present = {self.evaluated.get(request.key) for request in job.requests}
            keys = {request.key for request in job.requests}
            joining = []
            for revision_id, request in self.requests:
                if revision_id in present:
                    continue
                if revision_id in self.needed_by and not self.needed_by[revision_id] & keys:
                    continue  # a parent of none of this job's revisions
                key = -(len(added) + 1)
                added[key] = revision_id
                self.joined_as(key, revision_id)
                joining.append(request.model_copy(update={"key": key}))
            job.requests[:0] = joining
        return added


def retiming_of(
    batch: str, revision_id: int, run_kind: str, env_key: str, evaluation: Evaluation
) -> Retiming:
    """A companion's evaluation as the Retiming of its job's batch: per timed shape its per-call
    times and its blocks' means (scoring.block_means); its score only when it passed."""
    from harness.scoring import block_means

    shapes = [
        RetimedShape(
            shape=outcome.shape, times_ms=list(outcome.times_ms), means_ms=block_means(outcome.check)
        )
        for outcome in sorted(evaluation.shapes, key=lambda outcome: (outcome.set_name, outcome.index))
        if outcome.mean_ms is not None and outcome.times_ms
    ]
    return Retiming(
        batch=batch,
        revision_id=revision_id,
        task=evaluation.task,
        mode=run_kind,
        env_key=env_key,
        status=evaluation.status,
        score_ms=evaluation.score_ms if evaluation.status == "pass" else None,
        judge_version=JUDGE_VERSION,
        shapes=shapes,
    )


@dataclass
class Dispatched:
    """What `evaluate_and_record` did with each claimed run (by run id)."""

    recorded: dict[int, Run | None] = field(default_factory=dict)  # None: taken over
    failed: dict[int, str] = field(default_factory=dict)  # the worker's failure


def evaluate_and_record(
    store: Store,
    executor: Executor,
    environment: Environment,
    requests: list[EvaluationRequest],
    *,
    worker: str,
    on_shape: Callable[[int, ShapeOutcome], None] | None = None,
    on_recorded: Callable[[EvaluationRequest, Evaluation], None] | None = None,
    on_activity: Callable[[int, str], None] | None = None,
    on_job_recorded: Callable[[list[int]], None] | None = None,
    companions: Companions | None = None,
    family_of: dict[int, object] | None = None,
    on_dispatch: Callable[[int], None] | None = None,
) -> Dispatched:
    """Run the claimed requests (each `key` a run claimed by `worker`) on the executor and write
    the results as the executor hands them over (each evaluation as it ends in this process and
    the GPU workers, a Ray job's as the job ends), one transaction each time; an untimed one's
    shapes are also kept as they land (`record_shape`; `on_shape` hears of each after that). The
    claims of a job whose worker failed that were not written yet are released (the next
    tournament does them, resuming from their kept shapes); on an interruption every claim not
    yet written is released the same way and the exception goes on. `companions`: revisions
    timed again beside them in every job (Companions), kept as Retimings of its batch.
    `family_of` (claimed key -> family, its parent): a family's requests share one job.
    `on_job_recorded` hears the claimed keys of each job (one interleaved run) once all of its
    evaluations are written or failed: its comparisons can be drawn. `on_dispatch` hears how many shape evaluations the jobs hold, companions included."""
    dispatched = Dispatched()
    open_claims = {request.key for request in requests}
    keeps_shapes = {
        request.key: {outcome.index for outcome in request.resumed}
        for request in requests
        if not request.timed
    }

    def shape_done(key: int, outcome: ShapeOutcome) -> None:
        resumed = keeps_shapes.get(key)
        if resumed is not None and outcome.index not in resumed and key in open_claims:
            with store.session() as session:
                record_shape(session, key, worker, outcome)
        if on_shape is not None:
            on_shape(key, outcome)

    def release(keys: list[int]) -> None:
        with store.session() as session:
            for key in keys:
                release_claim(session, key, worker)
        open_claims.difference_update(keys)

    def done(job: Job, evaluations: list[Evaluation]) -> None:
        """Called as evaluations end: a whole job's at once, or one at a time (a job of one)."""
        with store.session() as session:
            for request, evaluation in zip(job.requests, evaluations):
                if request.key in joined:
                    session.add(
                        retiming_of(
                            batch_of[request.key],
                            joined[request.key],
                            companions.run_kind,
                            environment.env_key,
                            evaluation,
                        )
                    )
                    continue
                run = record_run(
                    session,
                    request.key,
                    worker,
                    evaluation,
                    score_ms=evaluation.score_ms,
                    batch=batch_of[request.key],
                    limits=request.limits,
                )
                dispatched.recorded[request.key] = run
        open_claims.difference_update(request.key for request in job.requests)
        if on_recorded is not None:
            for request, evaluation in zip(job.requests, evaluations):
                if request.key not in joined:
                    on_recorded(request, evaluation)
        settled(job)

    def failed(job: Job, reason: str) -> None:
        unwritten = [request.key for request in job.requests if request.key in open_claims]
        release(unwritten)  # those of its evaluations that ended were written as they ended
        for key in unwritten:
            dispatched.failed[key] = reason
        settled(job)

    def settled(job: Job) -> None:
        """The evaluations of `job` (a whole job, or one of its requests) are written or failed:
        tell `on_job_recorded` of each job of `jobs` none of whose requests is left."""
        for request in job.requests:
            pending[batch_of[request.key]].discard(request.key)
        for batch in {batch_of[request.key] for request in job.requests}:
            if not pending[batch] and batch not in told:
                told.add(batch)
                if on_job_recorded is not None:
                    on_job_recorded([key for key in keys_of[batch] if key not in joined])

    jobs = split_jobs(environment.device, environment.env_key, requests, executor.slots, family_of)
    joined = companions.join(jobs) if companions is not None else {}
    batch_of = {
        request.key: batch for job in jobs for batch in [new_batch()] for request in job.requests
    }  # one job: one interleaved run
    keys_of = {batch_of[job.requests[0].key]: [request.key for request in job.requests] for job in jobs}
    pending = {batch: set(keys) for batch, keys in keys_of.items()}
    told: set[str] = set()
    if on_dispatch is not None:
        on_dispatch(
            sum(
                len(load_task(request.task).shapes(default_shape_set(request.device, request.timed)))
                for job in jobs
                for request in job.requests
            )
        )
    try:
        executor.run(jobs, shape_done, done, failed, on_activity=on_activity)
    except BaseException:
        if open_claims:
            release(sorted(open_claims))
        raise
    return dispatched
