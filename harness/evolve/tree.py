"""The tree of an experiment's revisions, for its page (`harness experiments show ID --format
html`, rendered by harness.report.experiment).

Nodes: the revisions the experiment started from, every child it registered, and the steps that
produced no child (the proposer failed, the edit did not apply, nothing new), each under its
parent. Scores are the experiment's own: a child's from the interleaved run that timed it beside
its parent, a root's from the first such run it was timed in as a parent (never a leaderboard
score from another run: drift between runs is no difference). The best path leads from a root to
the fastest revision reached by steps that were each faster or the same within noise (its
comparison with its parent in that run, harness.scoring), at least one faster; when no step was
faster there is none.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from harness.evolve import outcomes
from harness.evolve.experiment import ExperimentSettings, _standings
from harness.report.diff import diff_lines
from harness.report.experiment import ExperimentTree, TreeNode, describe_outcome, lay_out_tree
from harness.report.history import diff_inputs
from harness.scoring import FASTER, SAME
from harness.store.models import Experiment
from harness.store.revisions import get_revision


def build_tree(session: Session, experiment: Experiment) -> ExperimentTree:
    settings = ExperimentSettings.model_validate(experiment.settings)
    standings = _standings(session, settings)
    steps_by_child = {
        step.child_id: step
        for step in experiment.steps
        if step.child_id is not None and step.status != outcomes.DUPLICATE
    }
    nodes: dict[str, TreeNode] = {}

    def add_revision(revision_id: int) -> TreeNode:
        key = f"r{revision_id}"
        if key in nodes:
            return nodes[key]
        revision = get_revision(session, revision_id)
        standing = standings.get(revision_id)
        step = steps_by_child.get(revision_id)
        status = standing.status if standing is not None else "not_run"
        if step is not None and step.finished_at is not None:
            status, score = step.status, step.score_ms  # its own step's run
        else:  # a root: its score where the experiment timed it beside a child
            score = next(
                (
                    s.parent_score_ms
                    for s in experiment.steps
                    if s.parent_id == revision_id and s.parent_score_ms
                ),
                None,
            )
        node = TreeNode(
            key=key,
            label=f"submission {revision_id} ({revision.label})",
            parent_key=None,
            status=status,
            score_ms=score if status == "pass" else None,
            vs_parent=step.vs_parent if step is not None else None,
            revision_id=revision_id,
            step=step,
            outcome=describe_outcome(step) if step is not None and step.finished_at is not None else "",
            diff=diff_lines(*diff_inputs(session, revision_id)),
        )
        nodes[key] = node
        if step is not None:
            parent = add_revision(step.parent_id)
            node.parent_key = parent.key
        return node

    for step in experiment.steps:
        parent = add_revision(step.parent_id)
        if step.child_id is not None and step.status != outcomes.DUPLICATE:
            add_revision(step.child_id)
        else:
            nodes[f"s{step.generation}"] = TreeNode(
                key=f"s{step.generation}",
                label=f"generation {step.generation}: no child",
                parent_key=parent.key,
                status=step.status,
                step=step,
                outcome=describe_outcome(step) if step.finished_at is not None else step.status,
            )
    if settings.from_id is not None:
        add_revision(settings.from_id)
    best = _best_path(list(nodes.values()))
    return lay_out_tree(list(nodes.values()), best)


def _best_path(nodes: list[TreeNode]) -> TreeNode | None:
    """Mark the best path (module docstring); return the node it leads to (None: no step was
    faster than its parent)."""
    by_key = {node.key: node for node in nodes}

    def path(node: TreeNode) -> list[TreeNode]:
        walk: list[TreeNode] = []
        while node is not None:
            walk.append(node)
            node = by_key.get(node.parent_key) if node.parent_key else None
        return walk

    def improved(node: TreeNode) -> bool:
        steps = [item for item in path(node) if item.step is not None]
        return (
            node.score_ms is not None
            and all(item.vs_parent in (FASTER, SAME) for item in steps)
            and any(item.vs_parent == FASTER for item in steps)
        )

    candidates = [node for node in nodes if not node.is_step and improved(node)]
    best = min(candidates, key=lambda node: (node.score_ms, node.revision_id), default=None)
    for node in path(best) if best is not None else []:
        node.on_best_path = True
    return best
