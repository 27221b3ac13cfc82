"""Evaluating an experiment's revisions, and judging each child against its parent in one run.

The experiment's only calls into the plan layer (harness.plan: the tournament, claims, limits)
are in this module.

- `evaluate_revisions`: the starting pool, as `harness tournament --only ID --mode benchmark`
  does (check, then time the passing ones with the task's reference).
- `evaluate_children`: the children that arrived together are checked together (the test
  phase, interleaved shape by shape); then the passing ones are timed, each parent's family (the
  parent first and last, its children between) in one interleaved job, shape by shape (P B C P'
  P B C P' ...), so that drift hits the parent and its children alike and siblings share the
  cost of the parent's timing. The parent's two timings are two passes of one evaluation in one
  child (`Evaluator.time_again`: a second process would start, compile and autotune again). The
  families of one batch share a job (P B Q D P' Q' ...), so
  that they share its fixed costs too (the children's start, the calibration of the harness's
  cost per shape, the run's reference cases: about 5 s a job on the H200), up to a group of
  children alive at once; with one worker per GPU (`--gpus N`) they are spread over N jobs.
  The parent's two timings are taken together (their per-call times joined): its mean stands
  for the middle of the run, and drift between the first and the last timing
  shows in its spread, so that it widens the comparison's noise instead of passing for a
  difference (an A-B-A design); the difference between its first and last timing measures the
  run's drift between blocks of calls, which the comparison adds to its variance
  (harness.scoring.timing_variance).
  Each child's timing is its benchmark run (recorded with the job's batch); the parent's is a
  `Retiming` of the same batch, so that the leaderboard, the story and `harness history` compare
  the child with its parent inside that run only (harness.report.leaderboard). A child whose run
  is already stored (a resumed experiment) is not timed again. The task's reference (with a
  passing timed run) joins every job too, a `Retiming` of its batch, so that each child's
  speedup comes from its own run (harness.standings); it is not timed twice where it is a
  family's parent there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from harness.errors import HarnessError
from harness.store.models import Retiming, Run
from harness.store.revisions import get_revision, reference_revision_id, revision_code
from harness.store.runs import find_run, new_batch, record_run, release_claim, reuse_or_claim, worker_name
from harness.store.session import Store

if TYPE_CHECKING:
    from harness.evolve.experiment import ExperimentSettings
    from harness.executors import Executor, Job
    from harness.sandbox.evaluation import Evaluation, ShapeOutcome

T = TypeVar("T")
TIMED_MODE = "benchmark"  # the run mode an experiment times in (the evaluation's public seeds)

Landed = Callable[[list[int]], None]  # child ids whose evaluation is complete, in order
Progress = Callable[[int, str], None]  # (revision id, what it is doing)


def _stopping_rule(settings: ExperimentSettings):
    from harness.config import get_settings
    from harness.timing import StoppingRule

    budget_s = (
        settings.budget_s if settings.budget_s is not None else get_settings().shape_budget(settings.device)
    )
    return StoppingRule(budget_s=budget_s)


def evaluate_revisions(
    store: Store, revision_ids: list[int], settings: ExperimentSettings, executor: Executor | None = None
) -> None:
    """Check the revisions, then time the passing ones with the task's reference; the runs land
    in the store (results already stored for this environment are reused)."""
    from harness.plan.tournament import run_tournament

    run_tournament(
        store,
        task=settings.task,
        device=settings.device,
        mode=TIMED_MODE,
        only=revision_ids,
        rule=_stopping_rule(settings),
        executor=executor,
    )


@dataclass
class _Family:
    parent_id: int
    children: list[int]


def evaluate_children(
    store: Store,
    children: list[tuple[int, int]],
    settings: ExperimentSettings,
    *,
    landed: Landed,
    progress: Progress = lambda revision_id, state: None,
    executor: Executor | None = None,
) -> None:
    """Evaluate (child, parent) pairs: check every child, then time each parent's passing
    children beside it (module docstring), on the executor (default: this process; with one
    worker per GPU the families' jobs run side by side, each on one GPU). `landed` hears the
    children whose evaluation is complete: the failing ones after the checks, the others as
    their parent's job is recorded."""
    from harness.executors import EvaluationRequest, InProcess, Job
    from harness.plan.phases import claim_ttl_s, retiming_of, store_limits
    from harness.plan.tournament import TournamentProgress, run_tournament
    from harness.sandbox.devices import default_shape_set
    from harness.sandbox.limits import SandboxLimits
    from harness.tasks import load_task

    child_ids = [child for child, _ in children]
    for child in child_ids:
        progress(child, "checking")

    with store.session() as session:
        label_of = {}
        for child in child_ids:
            revision = get_revision(session, child)
            label_of[f"{revision.lineage.name} r{revision.number}"] = child

    class CheckProgress(TournamentProgress):
        def step(self, description: str, advance: int = 1) -> None:
            for label, child in label_of.items():
                if description.startswith(label):
                    progress(child, f"checking: {description[len(label) :].lstrip(': ')}")

    own_executor = executor is None
    executor = executor or InProcess()
    checked = run_tournament(
        store,
        task=settings.task,
        device=settings.device,
        mode="test",
        only=child_ids,
        executor=executor,
        progress=CheckProgress(),
    )
    passed = set(checked.phases[0].passed) if checked.phases else set()
    environment = checked.environment
    landed([child for child in child_ids if child not in passed])

    task = load_task(settings.task)
    shape_set = default_shape_set(environment.device, timed=True)
    limits = store_limits(store, SandboxLimits.from_settings())
    rule = _stopping_rule(settings)
    worker = worker_name()
    families: dict[int, _Family] = {}
    for child, parent in children:
        if child in passed:
            families.setdefault(parent, _Family(parent, [])).children.append(child)

    blocks: list[list[EvaluationRequest]] = []  # per family: the parent (timed twice), its children
    next_parent_key = -1  # parents' requests get negative keys: they are not runs
    timed_already: list[int] = []
    open_claims: set[int] = set()
    labels: dict[int, int] = {}  # request key -> revision id
    parent_of: dict[int, int] = {}  # request key -> the parent id of its family
    with store.session() as session:
        for family in families.values():
            # the job times every child and the parent twice, shape by shape
            ttl_s = claim_ttl_s(limits, len(task.shapes(shape_set)) * (len(family.children) + 2), rule)
            requests = []
            for child in family.children:
                found = reuse_or_claim(
                    session,
                    child,
                    task,
                    TIMED_MODE,
                    environment,
                    shape_set=shape_set,
                    worker=worker,
                    ttl_s=ttl_s,
                    force=False,
                )
                if found.run is None or found.reused:  # stored already, or another worker's now
                    timed_already.append(child)
                    continue
                requests.append(
                    _request(session, found.run.id, child, environment, limits, rule, EvaluationRequest)
                )
                open_claims.add(found.run.id)
                labels[found.run.id] = child
            parent_run = find_run(session, family.parent_id, task.name, TIMED_MODE, environment.env_key)
            parent_timed = parent_run is not None and parent_run.score_ms is not None
            if requests and parent_timed:  # first and last, in one child: a Retiming
                key, next_parent_key = next_parent_key, next_parent_key - 1
                request = _request(
                    session, key, family.parent_id, environment, limits, rule, EvaluationRequest
                )
                requests.insert(0, request)
                labels[key] = family.parent_id
            if requests:
                blocks.append(requests)
                parent_of.update((request.key, family.parent_id) for request in requests)
        reference_id = reference_revision_id(session, task.name)
        reference_run = (
            find_run(session, reference_id, task.name, TIMED_MODE, environment.env_key)
            if reference_id is not None
            else None
        )
        reference_request = (
            _request(session, 0, reference_id, environment, limits, rule, EvaluationRequest)
            if reference_run is not None and reference_run.status == "pass" and reference_run.score_ms
            else None
        )
    jobs = [
        Job(device=environment.device, env_key=environment.env_key, requests=requests)
        for requests in pack_families(blocks, getattr(executor, "slots", 1))
    ]
    references: dict[int, int] = {}  # the reference's request key in each job -> its revision id
    for job in jobs if reference_request is not None else []:
        if any(request.key < 0 and labels[request.key] == reference_id for request in job.requests):
            continue  # a family's parent there: timed already
        key, next_parent_key = next_parent_key, next_parent_key - 1
        job.requests.insert(0, reference_request.model_copy(update={"key": key}))
        references[key] = labels[key] = reference_id
    landed(timed_already)

    failures: list[str] = []

    def on_shape(key: int, outcome: ShapeOutcome) -> None:
        timing = f" {outcome.mean_ms:.4g} ms" if outcome.mean_ms is not None else ""
        what = (
            "timing beside the children"
            if key in references
            else "timing beside its children"
            if key < 0
            else "timing beside its parent"
        )
        progress(labels[key], f"{what}: {outcome.set_name}[{outcome.index}] {outcome.status}{timing}")

    # One job: one interleaved run (batch). The executor hands evaluations over as they end, a
    # whole job's or one at a time; a child lands once its parent's timing is stored too.
    batch_of = {request.key: batch for job in jobs for batch in [new_batch()] for request in job.requests}
    family_of = {key: (batch_of[key], parent) for key, parent in parent_of.items()}  # (batch, parent id)
    # family -> its parent's timing is in (or there is none: the parent has no request)
    retimed = {family_of[block[0].key]: block[0].key > 0 for block in blocks}
    waiting: dict[tuple[str, int], list[int]] = {}  # children recorded, their parent's timing not in

    def done(job: Job, evaluations: list[Evaluation]) -> None:
        touched: set[tuple[str, int]] = set()
        with store.session() as session:
            for request, evaluation in zip(job.requests, evaluations):
                if request.key in references:
                    session.add(
                        retiming_of(
                            batch_of[request.key], reference_id, TIMED_MODE, environment.env_key, evaluation
                        )
                    )
                    continue
                batch, parent = family = family_of[request.key]
                touched.add(family)
                if request.key > 0:
                    record_run(
                        session, request.key, worker, evaluation, score_ms=evaluation.score_ms, batch=batch
                    )
                    waiting.setdefault(family, []).append(labels[request.key])
                    continue
                session.add(_retiming(batch, parent, environment.env_key, task, evaluation))
                retimed[family] = True
        open_claims.difference_update(request.key for request in job.requests)
        # a child lands (and is compared with its parent) once its parent's timing is stored
        landed([child for family in sorted(touched) if retimed[family] for child in waiting.pop(family, [])])

    def failed(job: Job, reason: str) -> None:
        keys = [request.key for request in job.requests if request.key > 0]
        with store.session() as session:
            for key in keys:
                release_claim(session, key, worker)
        open_claims.difference_update(keys)
        failures.append(reason)
        for family in sorted(
            {family_of[request.key] for request in job.requests if request.key in family_of}
        ):  # never compared
            landed(waiting.pop(family, []))

    try:
        executor.run(jobs, on_shape, done, failed)
    except BaseException:
        if open_claims:
            with store.session() as session:
                for key in sorted(open_claims):
                    release_claim(session, key, worker)
        raise
    finally:
        if own_executor:
            executor.close()
    if failures:
        raise HarnessError(f"timing the children beside their parents failed: {failures[0]}")


def pack_families(blocks: list[list[T]], slots: int, group: int | None = None) -> list[list[T]]:
    """The families' requests (each block a family: the parent first and last, its children) as
    jobs: spread over `slots` jobs first (one per worker), then each further family added to the
    shortest job it fits in without passing `group` requests (the children alive at once in one
    interleaved run), else a job of its own. A family is never split; blocks keep their order
    within a job."""
    if group is None:
        from harness.sandbox.devices import INTERLEAVE_GROUP

        group = INTERLEAVE_GROUP
    jobs: list[list[T]] = []
    for block in blocks:
        fits = [job for job in jobs if len(job) + len(block) <= group]
        if len(jobs) < max(1, slots) or not fits:
            jobs.append(list(block))
        else:
            min(fits, key=len).extend(block)
    return jobs


def _request(session, key: int, revision_id: int, environment, limits, rule, request_type):
    revision = get_revision(session, revision_id)
    return request_type.make(
        key,
        revision_code(revision),
        revision.filename,
        revision.task,
        device=environment.device,
        limits=limits,
        label=f"{revision.lineage.name} r{revision.number}",
        mode="test",
        timed=True,
        rule=rule,
    )


def _retiming(batch: str, revision_id: int, env_key: str, task, evaluation: Evaluation) -> Retiming:
    """The parent's timing of one job, each shape timed twice in one child (first and last:
    `Evaluator.time_again`): per shape, the per-call times of both passes joined and each pass's
    mean (their difference is the run's drift); its score from the joined means. Not passing
    when a pass failed."""
    from harness.scoring import score

    shapes: list[dict] = []
    if evaluation.status == "pass":
        for outcome in sorted(evaluation.shapes, key=lambda outcome: (outcome.set_name, outcome.index)):
            passes = outcome.check.get("passes") or []
            if outcome.mean_ms is None or len(passes) < 2:
                continue
            shapes.append(
                {
                    "shape": outcome.shape,
                    "times_ms": [time for item in passes for time in item["times_ms"]],
                    "means_ms": [item["mean_ms"] for item in passes],  # each pass's own: the run's drift
                }
            )
    means = [sum(item["times_ms"]) / len(item["times_ms"]) for item in shapes]
    return Retiming(
        batch=batch,
        revision_id=revision_id,
        task=task.name,
        mode=TIMED_MODE,
        env_key=env_key,
        status=evaluation.status,
        score_ms=score(means, task.ranking_by) if means else None,
        shapes=shapes,
    )


def parent_score_in_batch(session, batch: str | None, parent_id: int, env_key: str) -> float | None:
    """The parent's score in the interleaved run `batch`: its run of that batch, or its
    retiming there."""
    from sqlalchemy import select

    if batch is None:
        return None
    run = session.scalar(select(Run).where(Run.revision_id == parent_id, Run.batch == batch))
    if run is not None:
        return run.score_ms
    retiming = session.scalar(
        select(Retiming).where(
            Retiming.revision_id == parent_id, Retiming.batch == batch, Retiming.env_key == env_key
        )
    )
    return retiming.score_ms if retiming is not None else None
