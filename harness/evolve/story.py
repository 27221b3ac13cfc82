"""Reading experiments back for the reports (harness.report.experiment renders them): the list
(`harness experiments`) and one experiment's view (`harness experiments show ID`), from the rows
the loop wrote."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from harness.evolve import outcomes
from harness.evolve.experiment import ExperimentSettings, get_experiment, steps_window
from harness.report.experiment import ExperimentSummary, ExperimentView
from harness.store.models import Experiment


def summarize_experiment(experiment: Experiment) -> ExperimentSummary:
    settings = ExperimentSettings.model_validate(experiment.settings)
    steps = experiment.steps
    children = [step for step in steps if step.child_id is not None and step.status != outcomes.DUPLICATE]
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


def experiment_view(session: Session, experiment_id: int) -> ExperimentView:
    """The experiment, its settings and its summary: what its story and its page show."""
    experiment = get_experiment(session, experiment_id)
    settings = ExperimentSettings.model_validate(experiment.settings)
    return ExperimentView(
        experiment=experiment,
        settings=settings,
        summary=summarize_experiment(experiment),
        steps_window=steps_window(settings.parallel),
    )
