"""Evaluating an experiment's revisions, and judging each child against its parent in one run.

The experiment's only calls into the plan layer (harness.plan: the tournament, claims, limits)
are in this module.

- `evaluate_revisions`: the starting pool, as `harness tournament --only ID --mode benchmark`
  does (check, then time the passing ones with the task's reference).
- `evaluate_children`: the children that arrived together are checked together (the test
  phase, interleaved shape by shape); then the passing ones are timed in the timed phase of the
  plan, as `harness bench` times them (harness.plan.phases: the same claims, limits, records and
  companions): every job (one interleaved run, shape by shape; with one worker per GPU, one per
  GPU) holds its children, their parents and the task's reference, each of those two timed again
  there (a `Retiming` of the job's batch) when it is not evaluated there anyway, so that the
  leaderboard, the story and `harness history` compare a child with its parent and the reference
  inside that run only (harness.standing.batch). Every timed evaluation times each shape in blocks of
  calls (`Evaluator.time_again`, the first and the last of a shape's turns), so that drift
  between blocks widens the comparison's noise instead of passing for a difference (an A-B-A
  design; harness.scoring.timing_variance). A child whose run is already stored (a resumed
  experiment) is not timed again; a timeout recorded under shorter time limits than today's is
  (harness.store.runs.reuse_or_claim).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.store.session import Store

if TYPE_CHECKING:
    from harness.evolve.experiment import ExperimentSettings
    from harness.plan import Executor

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


def evaluate_children(
    store: Store,
    children: list[tuple[int, int]],
    settings: ExperimentSettings,
    *,
    landed: Landed,
    progress: Progress = lambda revision_id, state: None,
    executor: Executor | None = None,
) -> None:
    """Evaluate (child, parent) pairs: check every child, then time the passing ones beside
    their parents and the task's reference (module docstring; harness.plan.tournament.
    run_children), on the executor (default: this process; with one worker per GPU the jobs run
    side by side, each on one GPU). `landed` hears the children whose evaluation is complete:
    the failing ones after the checks, the others as the job that timed them is recorded, their
    parent's timing there included."""
    from harness.plan.tournament import run_children

    run_children(
        store,
        children,
        task=settings.task,
        device=settings.device,
        rule=_stopping_rule(settings),
        landed=landed,
        progress=progress,
        executor=executor,
    )
