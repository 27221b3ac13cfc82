"""The evolution loop: `harness evolve` runs an experiment of N generations, up to K at once.

Each generation (one `ExperimentStep` row):
1. choose a parent (harness.evolve.selection) from the pool, by its standing on the leaderboard
   of the experiment's device;
2. render `improve` for a passing parent or `fix` for a failing one (system prompt first), and
   record the step as `proposing`;
3. ask the proposer, with no store transaction open (a proposer may take minutes);
4. apply the reply to the parent (harness.evolve.edits), or take the file a builtin returned;
5. register the child in the parent's lineage (author = the proposer's name, message = its
   summary) and record the step as `evaluating`: a reply identical to the parent registers
   nothing (`unchanged`), bytes the lineage already has register nothing (`duplicate`);
6. evaluate the child (harness.evolve.judging: checked, then timed beside its parent in one
   interleaved run) and record its standing: status, reason, score, and the comparison with
   its parent from that run.
A proposer or edit failure ends the step with its status and reason and the loop goes on.

Asynchronous (`--parallel K`, evaluations on `--gpus N` workers): K proposal threads each take
the next generation, choose its parent, ask the proposer and register the child, so that at most
K proposals are in flight; the main thread evaluates the children that have arrived, together,
and folds each result back (the step *lands*: it gets its `arrival` number) as soon as its
evaluation is recorded. The proposers go on while children are evaluated: a generation is
launched while fewer than `steps_window(K)` = 2K - 1 steps are launched and not landed (K
proposals and up to K - 1 children waiting for the GPU or on it), so generation g is launched
once g - (2K - 1) steps have landed, and it chooses its parent seeing exactly the children of the
first g - (2K - 1) arrivals (its `sees`), whatever else has landed by then. With K = 1 that is
the serial loop: each generation sees every earlier one. So, given the seed and the order of
arrivals recorded in the store, every choice is determined; a resumed experiment makes the
choices the recorded arrivals dictate. (Before, the window was K: the proposers stopped while K
children were timed, and on one H200 `--parallel 4` took 41.6 % of the serial wall time.)

Resuming: a step left `proposing` asks its proposer again with the same prompt and seed, a step
left `evaluating` is evaluated, a generation with no step is launched as above. Every random
choice is seeded with the experiment's seed and the generation number.

An experiment whose every step ended without a child to evaluate (the proposer failed, the edit
did not apply, nothing new) ends `failed` with the reason, not `finished`.
"""

from __future__ import annotations

import random
import threading
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
from harness.evolve.judging import evaluate_children, evaluate_revisions
from harness.evolve.outcomes import StepFailed
from harness.evolve.prompts import prompt_context, render_step_prompt
from harness.evolve.proposers import DEFAULT_TIMEOUT_S, Proposal, ProposalRequest, Proposer, make_proposer
from harness.evolve.selection import ParentChoice, PoolMember, choose_parent
from harness.report.experiment import describe_outcome
from harness.standing.batch import score_in_batch
from harness.standing.board import Leaderboard, LeaderboardEntry, build_leaderboard
from harness.store.models import Experiment, ExperimentStep, Lineage, Revision, Run, utcnow
from harness.store.revisions import get_revision, register_revision, revision_code
from harness.store.session import Store

RUNNING, FINISHED, STOPPED, INTERRUPTED, FAILED = "running", "finished", "stopped", "interrupted", "failed"
DEFAULT_POPULATION = 4
DEFAULT_MAX_FIX_ATTEMPTS = 2
WAIT_S = 0.25  # how often the main thread wakes while it waits (Ctrl-C is handled between waits)

Reporter = Callable[[str], None]


class ExperimentEvents:
    """What the loop tells its caller as it goes; the calls come from the proposal threads and
    the main thread, so an implementation must be thread-safe. This one says nothing."""

    def note(self, line: str) -> None:
        """Something about the experiment as a whole (the starting pool's evaluation, a stop)."""

    def step(self, generation: int, state: str) -> None:
        """A step in flight changed: proposing, evaluating, what its evaluation is doing."""

    def landed(self, generation: int, line: str) -> None:
        """A step is complete: its one-line outcome."""


class PrintedEvents(ExperimentEvents):
    """Every event as one line to `report` (a pipe, a log file, a test)."""

    def __init__(self, report: Reporter, total: int = 0) -> None:
        self.report = report
        self.total = total
        self.lock = threading.Lock()
        self.last: dict[int, str] = {}

    def note(self, line: str) -> None:
        with self.lock:
            self.report(line)

    def step(self, generation: int, state: str) -> None:
        kind = state.split(":")[0]
        with self.lock:
            if self.last.get(generation) == kind:  # one line per phase of a step, not per shape
                return
            self.last[generation] = kind
            self.report(f"generation {generation}{f'/{self.total}' if self.total else ''}: {state}")

    def landed(self, generation: int, line: str) -> None:
        with self.lock:
            self.last.pop(generation, None)
            self.report(f"generation {generation}{f'/{self.total}' if self.total else ''}: {line}")


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
    parallel: int = Field(default=1, ge=1)  # proposals in flight, at most (steps_window)
    gpus: str | None = None  # one evaluation worker per GPU ("all" or a count); None: this process


def steps_window(parallel: int) -> int:
    """Steps launched and not landed, at most, with `parallel` proposals in flight: those and up
    to parallel - 1 children waiting for their evaluation or in it (1: the serial loop)."""
    return 2 * parallel - 1


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
    parallel: int = 1,
    gpus: str | None = None,
) -> int:
    """Check everything, then add the experiment row; returns its id. HarnessError, with nothing
    written, for a bad start point, a bad number, an unusable proposer or device (None: cuda when
    torch sees a GPU, else cpu)."""
    if (from_id is None) == (lineage is None):
        raise HarnessError("give exactly one of --from ID and --lineage NAME")
    for name, value, least in (
        ("generations", generations, 1),
        ("population", population, 1),
        ("parallel", parallel, 1),
    ):
        if value < least:
            raise HarnessError(f"--{name} must be at least {least}, not {value}")
    if max_fix_attempts < 0:
        raise HarnessError(f"--max-fix-attempts must be 0 or more, not {max_fix_attempts}")
    if budget_s is not None and budget_s <= 0:
        raise HarnessError(f"--budget must be positive, not {budget_s:g}")
    make_proposer(proposer, proposer_timeout_s)  # an unknown builtin or a missing command fails here
    if gpus is not None:
        from harness.plan import make_executor

        make_executor(
            gpus=gpus, device=device
        ).close()  # a bad count, or more GPUs than there are, fails here
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
        from harness.devices import resolve_device  # after the cheap checks

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
            parallel=parallel,
            gpus=gpus,
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
    known: frozenset[str]  # sha256 of the lineage's files when the step was launched


def run_experiment(
    store: Store,
    experiment_id: int,
    report: Reporter | None = None,
    *,
    events: ExperimentEvents | None = None,
) -> str:
    """Run (or resume) the experiment's remaining generations; returns its final status.

    Ctrl-C marks it `interrupted`; an evaluation that cannot run (a HarnessError, say) marks it
    `stopped` with the reason and propagates. Either way it can be resumed. `report` (one line
    per event) or `events` hear what happens.
    """
    with store.session() as session:
        experiment = get_experiment(session, experiment_id)
        if experiment.status in (FINISHED, FAILED):
            raise HarnessError(
                f"experiment {experiment_id} has finished all its generations; start a new one to go on"
            )
        settings = ExperimentSettings.model_validate(experiment.settings)
        experiment.status, experiment.reason, experiment.finished_at = RUNNING, "", None
    if events is None:
        events = PrintedEvents(report, settings.generations) if report is not None else ExperimentEvents()
    proposer = make_proposer(settings.proposer, settings.proposer_timeout_s)
    loop = _Loop(store, experiment_id, settings, proposer, events)
    try:
        status, reason = loop.run()
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


class _Loop:
    """One run of an experiment's remaining generations (module docstring): the proposal threads
    and the main thread share the state below under `lock`."""

    def __init__(
        self,
        store: Store,
        experiment_id: int,
        settings: ExperimentSettings,
        proposer: Proposer,
        events: ExperimentEvents,
    ) -> None:
        self.store, self.experiment_id, self.settings = store, experiment_id, settings
        self.proposer, self.events = proposer, events
        self.lock = threading.Condition()
        self.next_generation = 1
        self.arrivals = 0
        self.unlanded: set[int] = set()  # launched, not landed
        self.reask: list[_Prepared] = []  # steps left `proposing` by an interruption
        self.waiting: list[tuple[int, int, int]] = []  # (generation, child, parent) to evaluate
        self.stop_reason: str | None = None
        self.error: BaseException | None = None
        self.cancelled = False
        self.executor = None  # the evaluation workers (--gpus), for the whole run

    # --- the main thread ---------------------------------------------------------------------

    def run(self) -> tuple[str, str]:
        from harness.plan import make_executor

        self.executor = (
            make_executor(gpus=self.settings.gpus, device=self.settings.device)
            if self.settings.gpus
            else None
        )
        try:
            return self._run()
        finally:
            if self.executor is not None:
                self.executor.close()

    def _run(self) -> tuple[str, str]:
        evaluate_starting_pool(self.store, self.experiment_id, self.settings, self.events, self.executor)
        self._load()
        workers = [
            threading.Thread(target=self._propose_steps, name=f"proposer-{index}", daemon=True)
            for index in range(min(self.settings.parallel, self.settings.generations))
        ]
        for worker in workers:
            worker.start()
        try:
            while True:
                with self.lock:
                    while not self.waiting and not self._done() and self.error is None:
                        self.lock.wait(WAIT_S)
                    if self.error is not None:
                        raise self.error
                    if not self.waiting:
                        break
                    batch, self.waiting = sorted(self.waiting), []
                self._evaluate(batch)
        except BaseException:
            with self.lock:
                self.cancelled = True
                self.lock.notify_all()
            self.proposer.cancel()
            raise
        finally:
            for worker in workers:
                worker.join(timeout=10)
        if self.stop_reason is not None:
            return STOPPED, self.stop_reason
        return self._final_status()

    def _load(self) -> None:
        """Where an earlier run of this experiment left it."""
        with self.store.session() as session:
            steps = list(
                session.scalars(
                    select(ExperimentStep).where(ExperimentStep.experiment_id == self.experiment_id)
                )
            )
            for step in sorted(steps, key=lambda step: step.generation):
                if step.finished_at is not None:
                    continue
                self.unlanded.add(step.generation)
                if step.status == outcomes.EVALUATING:
                    self.waiting.append((step.generation, step.child_id, step.parent_id))
                    self.events.step(
                        step.generation,
                        f"evaluating submission {step.child_id} (registered before the interruption)",
                    )
                else:  # proposing: ask again
                    parent = get_revision(session, step.parent_id)
                    self.reask.append(
                        _Prepared(
                            step.generation,
                            step.started_at,
                            parent.id,
                            revision_code(parent),
                            parent.filename,
                            step.template,
                            step.prompt,
                            _lineage_files(session, self.settings.lineage),
                        )
                    )
        self.arrivals = max((step.arrival or 0 for step in steps), default=0)
        self.next_generation = max((step.generation for step in steps), default=0) + 1

    def _done(self) -> bool:
        launched_all = self.stop_reason is not None or self.next_generation > self.settings.generations
        return launched_all and not self.reask and not self.unlanded

    def _evaluate(self, batch: list[tuple[int, int, int]]) -> None:
        generation_of = {child: generation for generation, child, _ in batch}
        for generation, child, _ in batch:
            self.events.step(generation, f"evaluating submission {child}")

        def landed(children: list[int]) -> None:
            for child in sorted(children, key=generation_of.__getitem__):
                self._land(generation_of[child])

        def progress(revision_id: int, state: str) -> None:
            if revision_id in generation_of:
                self.events.step(generation_of[revision_id], f"evaluating submission {revision_id}: {state}")

        evaluate_children(
            self.store,
            [(child, parent) for _, child, parent in batch],
            self.settings,
            landed=landed,
            progress=progress,
            executor=self.executor,
        )

    def _land(self, generation: int) -> None:
        """Fold a finished step back: its standing (when it has a child), its arrival number."""
        with self.lock:
            with self.store.session() as session:
                step = _step(session, self.experiment_id, generation)
                if step.status == outcomes.EVALUATING:
                    _record_standing(session, step, self.settings)
                self.arrivals += 1
                step.arrival = self.arrivals
                step.finished_at = step.finished_at or utcnow()
                line = describe_outcome(step)
            self.unlanded.discard(generation)
            self.events.landed(generation, line)
            self.lock.notify_all()

    def _final_status(self) -> tuple[str, str]:
        with self.store.session() as session:
            steps = list(
                session.scalars(
                    select(ExperimentStep).where(ExperimentStep.experiment_id == self.experiment_id)
                )
            )
        failed = [step for step in steps if step.status in outcomes.NO_CHILD]
        if steps and len(failed) == len(steps):
            counts = Counter((step.status, step.reason) for step in failed)
            (status, reason), count = counts.most_common(1)[0]
            return FAILED, f"every generation failed; {count} of {len(steps)}: {status}: {reason}"
        return FINISHED, f"{self.settings.generations} generations"

    # --- the proposal threads ----------------------------------------------------------------

    def _propose_steps(self) -> None:
        try:
            while True:
                with self.lock:
                    prepared = self._launch()
                    if prepared is None:
                        return
                    proposal = self._ask(prepared) if self.proposer.immediate else None
                    if proposal is not None:
                        self._record_proposal(prepared, *proposal)
                        continue
                proposal = self._ask(prepared)
                with self.lock:
                    if self.cancelled:
                        return
                    self._record_proposal(prepared, *proposal)
        except Exception as exc:  # noqa: BLE001 - a store or harness error: the main thread raises it
            with self.lock:
                self.error = self.error or exc
                self.lock.notify_all()

    def _launch(self) -> _Prepared | None:
        """Under the lock: the next step to ask, its row written as `proposing`; None when there
        is nothing left to launch (or the experiment stops)."""
        while True:
            if self.cancelled or self.error is not None or self.stop_reason is not None:
                return None
            if self.reask:
                prepared = self.reask.pop(0)
                self.events.step(
                    prepared.generation,
                    f"proposing: asking again ({prepared.template} submission {prepared.parent_id})",
                )
                return prepared
            generation = self.next_generation
            if generation > self.settings.generations:
                return None
            window = steps_window(self.settings.parallel)
            if len(self.unlanded) >= window:
                self.lock.wait(WAIT_S)
                continue
            sees = max(0, generation - window)
            with self.store.session() as session:
                prepared = _prepare(session, self.experiment_id, self.settings, generation, sees)
                if prepared is None:
                    self.stop_reason = _no_parent_reason(self.settings)
                    self.events.note(f"generation {generation}: stopped: {self.stop_reason}")
                    self.lock.notify_all()
                    return None
                session.add(
                    ExperimentStep(
                        experiment_id=self.experiment_id,
                        generation=generation,
                        parent_id=prepared.parent_id,
                        template=prepared.template,
                        prompt=prepared.prompt,
                        proposer=self.proposer.name[:200],
                        started_at=prepared.started_at,
                        status=outcomes.PROPOSING,
                        sees=sees,
                    )
                )
            self.next_generation += 1
            self.unlanded.add(generation)
            self.events.step(generation, f"proposing: {prepared.template} submission {prepared.parent_id}")
            return prepared

    def _ask(self, prepared: _Prepared) -> tuple[Proposal, StepFailed | None, float]:
        request = ProposalRequest(
            prompt=prepared.prompt,
            parent_code=prepared.parent_code,
            seed=f"{self.settings.seed}:{prepared.generation}",
            known=prepared.known,
        )
        started = time.perf_counter()
        try:
            return self.proposer.propose(request), None, time.perf_counter() - started
        except StepFailed as exc:
            return Proposal(reply=exc.reply, stderr=exc.stderr), exc, time.perf_counter() - started

    def _record_proposal(
        self, prepared: _Prepared, proposal: Proposal, failure: StepFailed | None, elapsed_s: float
    ) -> None:
        """Under the lock: steps 4-5; a step without a child lands at once, a child waits for
        the main thread's evaluation."""
        content: bytes | None = None
        if failure is None:
            try:
                content = proposal.content
                if content is None:
                    content = apply_reply(
                        prepared.parent_code.decode("utf-8"), proposal.reply
                    ).content.encode()
            except StepFailed as exc:
                failure = exc
        with self.store.session() as session:
            step = _step(session, self.experiment_id, prepared.generation)
            step.reply, step.summary, step.elapsed_s = proposal.reply, proposal.summary, elapsed_s
            step.tokens, step.cost, step.meta, step.stderr = (
                proposal.tokens,
                proposal.cost,
                proposal.meta,
                proposal.stderr,
            )
            step.status = outcomes.EVALUATING
            if failure is not None:
                step.status, step.reason = failure.status, str(failure)
            elif content == prepared.parent_code:
                step.status, step.reason = outcomes.UNCHANGED, "the reply gives back the parent's exact bytes"
            else:
                _register_child(session, step, content, self.settings, prepared)
            child_id = step.child_id if step.status == outcomes.EVALUATING else None
        if child_id is None:
            self._land(prepared.generation)
        else:
            self.waiting.append((prepared.generation, child_id, prepared.parent_id))
            self.events.step(prepared.generation, f"evaluating submission {child_id}: waiting")
            self.lock.notify_all()


def _step(session: Session, experiment_id: int, generation: int) -> ExperimentStep | None:
    return session.scalar(
        select(ExperimentStep).where(
            ExperimentStep.experiment_id == experiment_id, ExperimentStep.generation == generation
        )
    )


def _own_children(session: Session, experiment_id: int) -> dict[int, ExperimentStep]:
    """Child id -> the step of this experiment that registered it (duplicates excluded)."""
    steps = session.scalars(
        select(ExperimentStep).where(
            ExperimentStep.experiment_id == experiment_id,
            ExperimentStep.child_id.is_not(None),
            ExperimentStep.status != outcomes.DUPLICATE,
        )
    )
    return {step.child_id: step for step in steps}


def _pool(
    session: Session, experiment_id: int, settings: ExperimentSettings, sees: int | None = None
) -> list[int]:
    """Revision ids the experiment builds on (see harness.evolve.selection); with `sees`, only
    the children of the first `sees` arrivals among the experiment's own."""
    own = _own_children(session, experiment_id)
    visible = {
        child
        for child, step in own.items()
        if sees is None or (step.arrival is not None and step.arrival <= sees)
    }
    if settings.from_id is None:
        lineage = session.scalar(select(Lineage).where(Lineage.name == settings.lineage))
        revisions = [revision.id for revision in lineage.revisions] if lineage else []
        return [revision for revision in revisions if revision not in own or revision in visible]
    children = sorted(visible, key=lambda child: own[child].generation)
    return [settings.from_id, *(child for child in children if child != settings.from_id)]


def _lineage_files(session: Session, lineage: str) -> frozenset[str]:
    return frozenset(
        session.scalars(select(Revision.code_sha256).join(Revision.lineage).where(Lineage.name == lineage))
    )


def evaluate_starting_pool(
    store: Store, experiment_id: int, settings: ExperimentSettings, events: ExperimentEvents, executor=None
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
    if missing:
        events.note(
            f"evaluating submission(s) {', '.join(map(str, missing))} on {settings.device} "
            "(parent candidates without a result)"
        )
        evaluate_revisions(store, missing, settings, executor)


def _choose(
    session: Session,
    experiment_id: int,
    settings: ExperimentSettings,
    generation: int,
    sees: int,
    standings: dict[int, LeaderboardEntry],
) -> ParentChoice | None:
    """The parent and template of `generation`, from the pool it sees (the children of the first
    `sees` arrivals, each with its `standings` entry) and the parents of the earlier generations:
    a function of the store's recorded arrivals, so `replay_parent_choices` finds it again."""
    pool = [
        PoolMember(
            revision_id,
            standings[revision_id].status if revision_id in standings else "not_run",
            standings[revision_id].score_ms if revision_id in standings else None,
        )
        for revision_id in _pool(session, experiment_id, settings, sees)
    ]
    steps = list(
        session.scalars(
            select(ExperimentStep).where(
                ExperimentStep.experiment_id == experiment_id, ExperimentStep.generation < generation
            )
        )
    )
    tried = Counter(step.parent_id for step in steps)
    fix_attempts = Counter(step.parent_id for step in steps if step.template == "fix")
    return choose_parent(
        pool,
        population=settings.population,
        tried=tried,
        fix_attempts=fix_attempts,
        max_fix_attempts=settings.max_fix_attempts,
        rng=random.Random(f"{settings.seed}:{generation}:select"),
    )


def replay_parent_choices(session: Session, experiment_id: int) -> list[tuple[int, int, int, str, str]]:
    """Each step's choice made again from the store: (generation, recorded parent, replayed
    parent, recorded template, replayed template). Every step sees the arrivals it saw, so the
    replay equals the record: the experiment is exact given its seed and its arrival order."""
    experiment = get_experiment(session, experiment_id)
    settings = ExperimentSettings.model_validate(experiment.settings)
    standings = _standings(session, settings)
    replayed = []
    for step in experiment.steps:
        choice = _choose(session, experiment_id, settings, step.generation, step.sees, standings)
        replayed.append(
            (
                step.generation,
                step.parent_id,
                choice.revision_id if choice else 0,
                step.template,
                choice.template if choice else "",
            )
        )
    return replayed


def _prepare(
    session: Session, experiment_id: int, settings: ExperimentSettings, generation: int, sees: int
) -> _Prepared | None:
    started_at = utcnow()
    board = _board(session, settings)  # built once: the parent's choice and its prompt read it
    choice = _choose(session, experiment_id, settings, generation, sees, _by_revision(board))
    if choice is None:
        return None
    parent = get_revision(session, choice.revision_id)
    context = prompt_context(session, parent, device=settings.device, board=board)
    return _Prepared(
        generation=generation,
        started_at=started_at,
        parent_id=parent.id,
        parent_code=revision_code(parent),
        parent_filename=parent.filename,
        template=choice.template,
        prompt=render_step_prompt(choice.template, context),
        known=_lineage_files(session, settings.lineage),
    )


def _record_standing(session: Session, step: ExperimentStep, settings: ExperimentSettings) -> None:
    entry = _standings(session, settings).get(step.child_id)
    if entry is None or entry.status == "not_run":
        step.status, step.reason = "not_run", f"the evaluator recorded no result on {settings.device}"
    else:
        step.status, step.reason = entry.status, entry.reason
        step.score_ms, step.vs_parent = entry.score_ms, entry.vs_parent
    run = session.scalar(
        select(Run)
        .where(
            Run.revision_id == step.child_id,
            Run.task == settings.task,
            Run.mode == "benchmark",
            Run.device == settings.device,
            Run.state == "done",
            Run.batch.is_not(None),
        )
        .order_by(Run.finished_at.desc())
        .limit(1)
    )
    if run is not None and step.vs_parent is not None:
        step.compared_in = run.batch
        step.parent_score_ms = score_in_batch(session, run.batch, step.parent_id, run.env_key)
    step.finished_at = utcnow()


def _board(session: Session, settings: ExperimentSettings) -> Leaderboard | None:
    """The leaderboard of the experiment's task on its device (harness.standing.board), where
    every standing evolution reads comes from; None before anything was done there."""
    has_runs = session.scalar(
        select(Run.id)
        .where(Run.task == settings.task, Run.state == "done", Run.device == settings.device)
        .limit(1)
    )
    if has_runs is None:
        return None
    return build_leaderboard(session, settings.task, settings.device)


def _by_revision(board: Leaderboard | None) -> dict[int, LeaderboardEntry]:
    return {entry.submission_id: entry for entry in board.entries} if board is not None else {}


def _standings(session: Session, settings: ExperimentSettings) -> dict[int, LeaderboardEntry]:
    """Each revision's entry on the experiment's leaderboard (none before anything was done)."""
    return _by_revision(_board(session, settings))


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
