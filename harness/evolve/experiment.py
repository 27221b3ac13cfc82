"""The evolution loop: `harness evolve` runs an experiment of N generations.

Each generation (one `ExperimentStep` row):
1. choose a parent (harness.evolve.selection) from the pool, by its standing on the leaderboard
   of the experiment's device;
2. render `improve` for a passing parent or `fix` for a failing one (system prompt first);
3. ask the proposer, with no store transaction open (a proposer may take minutes);
4. apply the reply to the parent (harness.evolve.edits), or take the file a builtin returned;
5. register the child in the parent's lineage (author = the proposer's name, message = its
   summary) and record the step as `evaluating`: a reply identical to the parent registers
   nothing (`unchanged`), bytes the lineage already has register nothing (`duplicate`);
6. evaluate the child (test, then timing, recorded in the store by the evaluator) and record its
   standing: status, reason, score, and the comparison with its parent.
A proposer or edit failure ends the step with its status and reason and the loop goes on.

Resuming: generations whose step is finished are skipped; a step left `evaluating` is evaluated
and finished; a generation with no step starts again. Every random choice is seeded with the
experiment's seed and the generation number, so a resumed experiment makes the choices the
uninterrupted one would have made (given the same results).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.errors import HarnessError
from harness.evolve import outcomes
from harness.evolve.edits import apply_reply
from harness.evolve.outcomes import StepFailed
from harness.evolve.prompts import prompt_context, render_step_prompt
from harness.evolve.proposers import DEFAULT_TIMEOUT_S, Proposal, ProposalRequest, Proposer, make_proposer
from harness.evolve.selection import ParentChoice, PoolMember, choose_parent
from harness.report.leaderboard import LeaderboardEntry, build_leaderboard, format_ms
from harness.store.models import Experiment, ExperimentStep, Lineage, Run, utcnow
from harness.store.revisions import get_revision, register_revision, revision_code
from harness.store.session import Store

RUNNING, FINISHED, STOPPED, INTERRUPTED = "running", "finished", "stopped", "interrupted"
DEFAULT_POPULATION = 4
DEFAULT_MAX_FIX_ATTEMPTS = 2

Reporter = Callable[[str], None]


class ExperimentSettings(BaseModel):
    """What `harness evolve` was asked to do; stored as the experiment's `settings` json."""

    task: str
    lineage: str
    from_id: int | None = None
    generations: int = Field(ge=1)
    population: int = Field(default=DEFAULT_POPULATION, ge=1)
    seed: int = 0
    device: str
    proposer: str
    proposer_timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    max_fix_attempts: int = Field(default=DEFAULT_MAX_FIX_ATTEMPTS, ge=0)
    budget_s: float | None = Field(default=None, gt=0)  # timed seconds per shape (None: settings)


def evaluate_revision(store: Store, revision_id: int, settings: ExperimentSettings) -> None:
    """Evaluate one revision as `harness tournament --only ID --mode benchmark` does: check it,
    then time the passing one with the task's reference; the runs land in the store (results
    already stored for this environment are reused)."""
    from harness.plan.tournament import run_tournament
    from harness.timing import StoppingRule  # with the tournament: imports torch, only when evaluating

    rule = StoppingRule(budget_s=settings.budget_s) if settings.budget_s is not None else None
    run_tournament(
        store, task=settings.task, device=settings.device, mode="benchmark", only=[revision_id], rule=rule
    )


def create_experiment(
    store: Store,
    *,
    proposer: str,
    device: str | None,
    generations: int,
    from_id: int | None = None,
    lineage: str | None = None,
    population: int = DEFAULT_POPULATION,
    seed: int = 0,
    proposer_timeout_s: float = DEFAULT_TIMEOUT_S,
    max_fix_attempts: int = DEFAULT_MAX_FIX_ATTEMPTS,
    budget_s: float | None = None,
) -> int:
    """Check everything, then add the experiment row; returns its id. HarnessError, with nothing
    written, for a bad start point, a bad number, an unusable proposer or device (None: cuda when
    torch sees a GPU, else cpu)."""
    if (from_id is None) == (lineage is None):
        raise HarnessError("give exactly one of --from ID and --lineage NAME")
    for name, value, least in (("generations", generations, 1), ("population", population, 1)):
        if value < least:
            raise HarnessError(f"--{name} must be at least {least}, not {value}")
    if max_fix_attempts < 0:
        raise HarnessError(f"--max-fix-attempts must be 0 or more, not {max_fix_attempts}")
    if budget_s is not None and budget_s <= 0:
        raise HarnessError(f"--budget must be positive, not {budget_s:g}")
    make_proposer(proposer, proposer_timeout_s)  # an unknown builtin or a missing command fails here
    with store.session() as session:
        if from_id is not None:
            start = get_revision(session, from_id)
            lineage_row = start.lineage
            task = start.task
        else:
            lineage_row = session.scalar(select(Lineage).where(Lineage.name == lineage))
            if lineage_row is None:
                raise HarnessError(f"unknown lineage {lineage!r}")
            if not lineage_row.revisions:
                raise HarnessError(f"lineage {lineage!r} has no revisions")
            task = lineage_row.revisions[-1].task
        from harness.sandbox.evaluation import resolve_device  # imports torch: after the cheap checks

        settings = ExperimentSettings(
            task=task,
            lineage=lineage_row.name,
            from_id=from_id,
            generations=generations,
            population=population,
            seed=seed,
            device=resolve_device(device),
            proposer=proposer.strip(),
            proposer_timeout_s=proposer_timeout_s,
            max_fix_attempts=max_fix_attempts,
            budget_s=budget_s,
        )
        experiment = Experiment(
            task=task,
            lineage_id=lineage_row.id,
            proposer=settings.proposer[:200],
            settings=settings.model_dump(),
            status=RUNNING,
        )
        session.add(experiment)
        session.flush()
        return experiment.id


def get_experiment(session: Session, experiment_id: int) -> Experiment:
    experiment = session.get(Experiment, experiment_id) if experiment_id > 0 else None
    if experiment is None:
        raise HarnessError(f"there is no experiment {experiment_id}")
    return experiment


@dataclass
class _Prepared:
    """A generation ready for its proposer: everything read from the store beforehand."""

    generation: int
    started_at: datetime
    parent_id: int
    parent_code: bytes
    parent_filename: str
    template: str
    prompt: str


def run_experiment(store: Store, experiment_id: int, report: Reporter = lambda line: None) -> str:
    """Run (or resume) the experiment's remaining generations; returns its final status.

    Ctrl-C marks it `interrupted`; an evaluation that cannot run (a HarnessError, say) marks it
    `stopped` with the reason and propagates. Either way it can be resumed.
    """
    with store.session() as session:
        experiment = get_experiment(session, experiment_id)
        if experiment.status == FINISHED:
            raise HarnessError(
                f"experiment {experiment_id} has finished all its generations; start a new one to go on"
            )
        settings = ExperimentSettings.model_validate(experiment.settings)
        experiment.status, experiment.reason, experiment.finished_at = RUNNING, "", None
    proposer = make_proposer(settings.proposer, settings.proposer_timeout_s)
    try:
        status, reason = _run_generations(store, experiment_id, settings, proposer, report)
    except KeyboardInterrupt:
        _finish(store, experiment_id, INTERRUPTED, "interrupted; resume with `harness evolve --resume`")
        raise
    except BaseException as exc:
        _finish(
            store,
            experiment_id,
            STOPPED,
            f"{type(exc).__name__}: {exc}" if not isinstance(exc, HarnessError) else str(exc),
        )
        raise
    _finish(store, experiment_id, status, reason)
    return status


def _finish(store: Store, experiment_id: int, status: str, reason: str) -> None:
    with store.session() as session:
        experiment = get_experiment(session, experiment_id)
        experiment.status, experiment.reason, experiment.finished_at = status, reason, utcnow()


def _run_generations(
    store: Store,
    experiment_id: int,
    settings: ExperimentSettings,
    proposer: Proposer,
    report: Reporter,
) -> tuple[str, str]:
    _evaluate_starting_pool(store, experiment_id, settings, report)
    for generation in range(1, settings.generations + 1):
        with store.session() as session:
            step = _step(session, experiment_id, generation)
            if step is not None and step.finished_at is not None:
                continue
            if step is not None:  # registered, not evaluated: the run was interrupted there
                child_id = step.child_id
                prepared = None
                report(
                    f"generation {generation}/{settings.generations}: evaluating submission {child_id}, "
                    "registered before the interruption"
                )
            else:
                prepared = _prepare(session, experiment_id, settings, generation)
                if prepared is None:
                    reason = _no_parent_reason(settings)
                    report(f"generation {generation}: stopped: {reason}")
                    return STOPPED, reason
        if prepared is not None:
            report(
                f"generation {generation}/{settings.generations}: {prepared.template} submission {prepared.parent_id}"
            )
            child_id = _propose_and_register(store, experiment_id, settings, proposer, prepared)
        if child_id is not None:
            evaluate_revision(store, child_id, settings)
        with store.session() as session:
            step = _step(session, experiment_id, generation)
            if step.status == outcomes.EVALUATING:
                _record_standing(session, step, settings)
            report(f"  {describe_outcome(step)}")
    return FINISHED, f"{settings.generations} generations"


def _step(session: Session, experiment_id: int, generation: int) -> ExperimentStep | None:
    return session.scalar(
        select(ExperimentStep).where(
            ExperimentStep.experiment_id == experiment_id, ExperimentStep.generation == generation
        )
    )


def _pool(session: Session, experiment_id: int, settings: ExperimentSettings) -> list[int]:
    """Revision ids the experiment builds on (see harness.evolve.selection)."""
    if settings.from_id is None:
        lineage = session.scalar(select(Lineage).where(Lineage.name == settings.lineage))
        return [revision.id for revision in lineage.revisions] if lineage else []
    children = session.scalars(
        select(ExperimentStep.child_id).where(
            ExperimentStep.experiment_id == experiment_id,
            ExperimentStep.child_id.is_not(None),
            ExperimentStep.status.not_in((outcomes.DUPLICATE,)),
        )
    )
    return [settings.from_id, *(child for child in children if child != settings.from_id)]


def _standings(session: Session, settings: ExperimentSettings) -> dict[int, LeaderboardEntry]:
    has_runs = session.scalar(
        select(Run.id)
        .where(Run.task == settings.task, Run.state == "done", Run.device == settings.device)
        .limit(1)
    )
    if has_runs is None:
        return {}
    board = build_leaderboard(session, settings.task, settings.device)
    return {entry.submission_id: entry for entry in board.entries}


def _evaluate_starting_pool(
    store: Store, experiment_id: int, settings: ExperimentSettings, report: Reporter
) -> None:
    """Give every pool member without a result on the device one, so that selection can rank it."""
    with store.session() as session:
        pool = _pool(session, experiment_id, settings)
        standings = _standings(session, settings)
    missing = [
        revision_id
        for revision_id in pool
        if revision_id not in standings or standings[revision_id].status == "not_run"
    ]
    for revision_id in missing:
        report(
            f"evaluating submission {revision_id} on {settings.device} (a parent candidate without a result)"
        )
        evaluate_revision(store, revision_id, settings)


def _prepare(
    session: Session, experiment_id: int, settings: ExperimentSettings, generation: int
) -> _Prepared | None:
    started_at = utcnow()
    standings = _standings(session, settings)
    pool = [
        PoolMember(
            revision_id,
            standings[revision_id].status if revision_id in standings else "not_run",
            standings[revision_id].score_ms if revision_id in standings else None,
        )
        for revision_id in _pool(session, experiment_id, settings)
    ]
    steps = list(session.scalars(select(ExperimentStep).where(ExperimentStep.experiment_id == experiment_id)))
    tried = Counter(step.parent_id for step in steps)
    fix_attempts = Counter(step.parent_id for step in steps if step.template == "fix")
    choice: ParentChoice | None = choose_parent(
        pool,
        population=settings.population,
        tried=tried,
        fix_attempts=fix_attempts,
        max_fix_attempts=settings.max_fix_attempts,
        rng=random.Random(f"{settings.seed}:{generation}:select"),
    )
    if choice is None:
        return None
    parent = get_revision(session, choice.revision_id)
    context = prompt_context(session, parent, device=settings.device)
    return _Prepared(
        generation=generation,
        started_at=started_at,
        parent_id=parent.id,
        parent_code=revision_code(parent),
        parent_filename=parent.filename,
        template=choice.template,
        prompt=render_step_prompt(choice.template, context),
    )


def _no_parent_reason(settings: ExperimentSettings) -> str:
    where = (
        f"submission {settings.from_id} and its children"
        if settings.from_id
        else f"lineage {settings.lineage}"
    )
    return (
        f"no parent left to try: nothing in {where} passes on {settings.device}, and every failing "
        f"revision has had its {settings.max_fix_attempts} fix attempt(s) or failed in a way no edit can fix"
    )


def _propose_and_register(
    store: Store,
    experiment_id: int,
    settings: ExperimentSettings,
    proposer: Proposer,
    prepared: _Prepared,
) -> int | None:
    """Steps 3-5 of a generation; returns the child to evaluate, or None when there is none."""
    request = ProposalRequest(
        prompt=prepared.prompt,
        parent_code=prepared.parent_code,
        seed=f"{settings.seed}:{prepared.generation}",
    )
    failure: StepFailed | None = None
    content: bytes | None = None
    started = time.perf_counter()
    try:
        proposal = proposer.propose(request)
    except StepFailed as exc:
        failure, proposal = exc, Proposal(reply=exc.reply)
    elapsed_s = time.perf_counter() - started
    if failure is None:
        try:
            content = proposal.content
            if content is None:
                content = apply_reply(prepared.parent_code.decode("utf-8"), proposal.reply).content.encode()
        except StepFailed as exc:
            failure = exc
    with store.session() as session:
        step = ExperimentStep(
            experiment_id=experiment_id,
            generation=prepared.generation,
            parent_id=prepared.parent_id,
            template=prepared.template,
            prompt=prepared.prompt,
            reply=proposal.reply,
            proposer=proposer.name[:200],
            summary=proposal.summary,
            elapsed_s=elapsed_s,
            tokens=proposal.tokens,
            cost=proposal.cost,
            meta=proposal.meta,
            started_at=prepared.started_at,
            status=outcomes.EVALUATING,
        )
        if failure is not None:
            step.status, step.reason = failure.status, str(failure)
        elif content == prepared.parent_code:
            step.status, step.reason = outcomes.UNCHANGED, "the reply gives back the parent's exact bytes"
        else:
            _register_child(session, step, content, settings, prepared)
        if step.status != outcomes.EVALUATING:
            step.finished_at = utcnow()
        session.add(step)
        return step.child_id if step.status == outcomes.EVALUATING else None


def _register_child(
    session: Session, step: ExperimentStep, content: bytes, settings: ExperimentSettings, prepared: _Prepared
) -> None:
    message = step.summary or (
        f"{prepared.template} of submission {prepared.parent_id} by {step.proposer} "
        f"(experiment {step.experiment_id}, generation {prepared.generation})"
    )
    try:
        outcome = register_revision(
            session,
            content,
            prepared.parent_filename,
            lineage=settings.lineage,
            parent_id=prepared.parent_id,
            message=message,
            author=step.proposer,
            task=settings.task,
        )
    except HarnessError as exc:  # the child's bytes cannot be a revision (empty, too large, ...)
        step.status, step.reason = outcomes.REJECTED, str(exc)
        return
    step.child_id = outcome.revision.id
    if not outcome.created:
        step.status = outcomes.DUPLICATE
        step.reason = f"these bytes are already submission {outcome.revision.id}: nothing new to evaluate"


def _record_standing(session: Session, step: ExperimentStep, settings: ExperimentSettings) -> None:
    entry = _standings(session, settings).get(step.child_id)
    if entry is None or entry.status == "not_run":
        step.status, step.reason = "not_run", f"the evaluator recorded no result on {settings.device}"
    else:
        step.status, step.reason = entry.status, entry.reason
        step.score_ms, step.vs_parent = entry.score_ms, entry.vs_parent
    step.finished_at = utcnow()


def describe_outcome(step: ExperimentStep) -> str:
    """One line: what the generation produced."""
    if step.child_id is None or step.status in (outcomes.DUPLICATE,):
        return f"{step.status}: {step.reason}"
    text = f"submission {step.child_id}: {step.status}"
    if step.score_ms is not None:
        text += f", {format_ms(step.score_ms)} ms"
    if step.vs_parent:
        text += (
            f", {step.vs_parent} than its parent"
            if step.vs_parent != "same within noise"
            else ", same as its parent within noise"
        )
    if step.status != "pass" and step.reason:
        text += f" ({step.reason})"
    return text
