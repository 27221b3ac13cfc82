"""Reading experiments back: the list (`harness experiments`) and one experiment's story, step by
step (`harness experiments show ID`), from the rows the loop wrote. What a proposer replied or
wrote to stderr, the prompts (a candidate's code and errors) and the names are shown with their
control characters escaped (harness.report.text): in the table all of them, in the story all but
line breaks and tabs."""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from harness.evolve.experiment import ExperimentSettings, describe_outcome, get_experiment, steps_window
from harness.report.leaderboard import format_ms
from harness.report.text import escape_controls
from harness.store.models import Experiment, ExperimentStep

PREVIEW_LINES = 6


@dataclass(frozen=True)
class ExperimentSummary:
    id: int
    task: str
    lineage: str
    start: str  # "submission 7" or "lineage NAME"
    proposer: str
    device: str
    generations_done: int
    generations: int
    children: int
    passing: int
    best_score_ms: float | None
    best_child_id: int | None
    status: str
    started_at: str


def summarize_experiment(experiment: Experiment) -> ExperimentSummary:
    settings = ExperimentSettings.model_validate(experiment.settings)
    steps = experiment.steps
    children = [step for step in steps if step.child_id is not None and step.status != "duplicate"]
    timed = [step for step in children if step.status == "pass" and step.score_ms is not None]
    best = min(timed, key=lambda step: step.score_ms) if timed else None
    return ExperimentSummary(
        id=experiment.id,
        task=experiment.task,
        lineage=settings.lineage,
        start=f"submission {settings.from_id}"
        if settings.from_id is not None
        else f"lineage {settings.lineage}",
        proposer=experiment.proposer,
        device=settings.device,
        generations_done=sum(step.finished_at is not None for step in steps),
        generations=settings.generations,
        children=len(children),
        passing=sum(step.status == "pass" for step in children),
        best_score_ms=best.score_ms if best else None,
        best_child_id=best.child_id if best else None,
        status=experiment.status,
        started_at=f"{experiment.started_at:%Y-%m-%d %H:%M}",
    )


def list_experiments(session: Session) -> list[ExperimentSummary]:
    experiments = session.scalars(
        select(Experiment).options(selectinload(Experiment.steps)).order_by(Experiment.id)
    )
    return [summarize_experiment(experiment) for experiment in experiments]


def experiments_table(summaries: list[ExperimentSummary]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    columns = ("id", "task", "from", "proposer", "device", "generations", "children", "passing", "best")
    for column in (*columns, "status", "started (UTC)"):
        table.add_column(column, no_wrap=column in ("id", "generations", "started (UTC)"))
    for summary in summaries:
        best = (
            f"{format_ms(summary.best_score_ms)} ms (#{summary.best_child_id})"
            if summary.best_score_ms is not None
            else "-"
        )
        cells = (
            str(summary.id),
            summary.task,
            summary.start,
            summary.proposer,
            summary.device,
            f"{summary.generations_done}/{summary.generations}",
            str(summary.children),
            str(summary.passing),
            best,
            summary.status,
            summary.started_at,
        )
        table.add_row(*(Text(escape_controls(str(cell))) for cell in cells))
    return table


def render_story(session: Session, experiment_id: int, *, full: bool = False) -> str:
    """The experiment's settings and outcome, then each generation: parent and template, what the
    proposer said and cost, and what became of the child. `full` adds every prompt and reply."""
    experiment = get_experiment(session, experiment_id)
    summary = summarize_experiment(experiment)
    settings = ExperimentSettings.model_validate(experiment.settings)
    status = f"status: {experiment.status}" + (f" ({experiment.reason})" if experiment.reason else "")
    status += f"; {summary.generations_done} of {summary.generations} generations done"
    status += f"; started {experiment.started_at:%Y-%m-%d %H:%M:%S} UTC"
    if experiment.finished_at:
        status += f", ended {experiment.finished_at:%Y-%m-%d %H:%M:%S} UTC"
    children = f"children: {summary.children} registered, {summary.passing} passing"
    if summary.best_score_ms is not None:
        children += f"; best: submission {summary.best_child_id} at {format_ms(summary.best_score_ms)} ms"
    lines = [
        f"experiment {experiment.id}: {experiment.task}, {summary.start}, proposer {experiment.proposer!r}",
        (
            f"settings: generations {settings.generations}, population {settings.population}, "
            f"seed {settings.seed}, device {settings.device}, fix attempts per parent "
            f"{settings.max_fix_attempts}, proposer time limit {settings.proposer_timeout_s:g} s, "
            f"parallel {settings.parallel}" + (f", gpus {settings.gpus}" if settings.gpus else "")
        ),
        status,
        children,
    ]
    if settings.parallel > 1:
        lines.append(
            f"proposals in flight: up to {settings.parallel}, steps launched and not landed up to "
            f"{steps_window(settings.parallel)}; generation g chose its parent seeing the "
            f"children of the first g-{steps_window(settings.parallel)} arrivals"
        )
    for step in experiment.steps:
        lines.append("")
        lines.extend(_step_lines(step, full=full))
    return escape_controls("\n".join(lines), block=True)


def _step_lines(step: ExperimentStep, *, full: bool) -> list[str]:
    cost = []
    if step.elapsed_s is not None:
        cost.append(f"{step.elapsed_s:.1f} s")
    if step.tokens is not None:
        cost.append(f"{step.tokens} tokens")
    if step.cost is not None:
        cost.append(f"cost {step.cost:g}")
    lines = [
        f"generation {step.generation}: {step.template} submission {step.parent_id}, asked {step.proposer}"
        + (f" ({', '.join(cost)})" if cost else ""),
        f"  order: saw {step.sees} arrival(s) when it chose its parent; "
        + (f"arrived {_ordinal(step.arrival)}" if step.arrival is not None else "not arrived yet"),
    ]
    if step.summary:
        lines.append(f"  summary: {step.summary}")
    if full:
        lines += ["  prompt:", *_indent(step.prompt), "  reply:", *_indent(step.reply)]
        if step.stderr:
            lines += ["  proposer stderr:", *_indent(step.stderr)]
    elif step.stderr.strip():
        count = len(step.stderr.strip().split("\n"))
        lines.append(f"  proposer stderr: {count} line(s) (--full shows them)")
    else:
        reply = step.reply.strip().split("\n") if step.reply.strip() else []
        if reply:
            shown = reply[:PREVIEW_LINES]
            more = len(reply) - len(shown)
            lines += ["  reply:", *_indent("\n".join(shown))]
            if more:
                lines.append(f"    ... {more} more lines (--full shows the prompt and the whole reply)")
    outcome = (
        describe_outcome(step)
        if step.finished_at is not None
        else f"{step.status}, not finished (resume to finish it)"
    )
    lines.append(f"  -> {outcome}")
    return lines


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _indent(text: str) -> list[str]:
    return [f"    {line}" for line in text.rstrip("\n").split("\n")]
