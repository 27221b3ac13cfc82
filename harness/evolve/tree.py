"""`harness experiments show ID --format html`: one self-contained page with the tree of the
experiment's revisions (inline SVG and CSS, a few lines of inline script, no external assets).

Nodes: the revisions the experiment started from, every child it registered, and, as small grey
squares, the steps that produced no child (the proposer failed, the edit did not apply, nothing
new), each under its parent. Edges go parent -> child. A node's colour is its score on the
experiment's device (green for the best, through yellow to orange for the slowest passing
one, on a log scale), red when it fails, white when it has no result. The best path (from the
root to the fastest passing revision) is drawn thick and gold. Clicking a node opens its panel
below the tree: the step's template, parent and proposer, the prompt's summary, the outcome,
the diff against the parent (coloured), and the prompt, reply and proposer stderr folded.

Layout (computed here): depth = distance from the root, leaves one slot apart in the order of
a depth-first walk (children by id), a parent centred over its children.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from harness.evolve import outcomes
from harness.evolve.experiment import ExperimentSettings, _standings, describe_outcome, get_experiment
from harness.evolve.story import summarize_experiment
from harness.report.diff import DiffLine, diff_lines
from harness.report.history import diff_inputs
from harness.report.leaderboard import format_ms
from harness.store.models import ExperimentStep
from harness.store.revisions import get_revision

SLOT_PX = 120
LEVEL_PX = 96
MARGIN_PX = 40
SCORE_LABEL_PX = 100  # room for the score written right of the last node
RADIUS_PX = 22
PROMPT_SUMMARY_LINES = 8
FAILED_COLOUR = "#d73027"
NO_CHILD_COLOUR = "#9e9e9e"
NOT_RUN_COLOUR = "#ffffff"
BEST_COLOUR, SLOWEST_COLOUR = (26, 152, 80), (244, 109, 67)  # green, through yellow, to orange
MIDDLE_COLOUR = (254, 224, 139)


@dataclass
class TreeNode:
    key: str  # "r<id>" for a revision, "s<generation>" for a step without a child
    label: str
    parent_key: str | None
    status: str
    score_ms: float | None = None
    revision_id: int | None = None
    step: ExperimentStep | None = None
    outcome: str = ""
    diff: list[DiffLine] = field(default_factory=list)
    prompt_summary: str = ""
    children: list[TreeNode] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    colour: str = NOT_RUN_COLOUR
    on_best_path: bool = False

    @property
    def is_step(self) -> bool:
        return self.revision_id is None

    @property
    def title(self) -> str:
        score = f", {format_ms(self.score_ms)} ms" if self.score_ms is not None else ""
        return f"{self.label}: {self.status}{score}"


@dataclass
class ExperimentTree:
    nodes: list[TreeNode]
    width: int
    height: int
    best: TreeNode | None


def build_tree(session: Session, experiment_id: int) -> ExperimentTree:
    experiment = get_experiment(session, experiment_id)
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
        node = TreeNode(
            key=key,
            label=f"submission {revision_id} ({revision.lineage.name} r{revision.number})",
            parent_key=None,
            status=standing.status if standing is not None else "not_run",
            score_ms=standing.score_ms if standing is not None and standing.status == "pass" else None,
            revision_id=revision_id,
            step=step,
            outcome=describe_outcome(step) if step is not None and step.finished_at is not None else "",
            diff=diff_lines(*diff_inputs(session, revision_id)),
        )
        nodes[key] = node
        if step is not None:
            node.prompt_summary = _prompt_summary(step.prompt)
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
                prompt_summary=_prompt_summary(step.prompt),
            )
    if settings.from_id is not None:
        add_revision(settings.from_id)
    for node in nodes.values():
        if node.parent_key is not None:
            nodes[node.parent_key].children.append(node)
    for node in nodes.values():
        node.children.sort(key=lambda child: (child.is_step, child.revision_id or 0, child.key))
    roots = sorted(
        (node for node in nodes.values() if node.parent_key is None), key=lambda node: node.revision_id or 0
    )
    slots = _layout(roots)
    depth = max((node.y for node in nodes.values()), default=0)
    best = _colour(list(nodes.values()))
    return ExperimentTree(
        nodes=sorted(nodes.values(), key=lambda node: (node.y, node.x)),
        width=int(2 * MARGIN_PX + max(slots - 1, 0) * SLOT_PX + SCORE_LABEL_PX),
        height=int(2 * MARGIN_PX + depth),
        best=best,
    )


def _prompt_summary(prompt: str) -> str:
    """The headings and first lines of the prompt the proposer read."""
    lines = [line for line in prompt.split("\n") if line.strip()]
    headings = [line for line in lines if line.startswith("#")]
    shown = headings[:PROMPT_SUMMARY_LINES] or lines[:PROMPT_SUMMARY_LINES]
    return "\n".join(shown) + f"\n({len(prompt.split(chr(10)))} lines in all)"


def _layout(roots: list[TreeNode]) -> int:
    """Positions every node; returns the number of leaf slots used."""
    next_slot = 0

    def place(node: TreeNode, depth: int) -> None:
        nonlocal next_slot
        node.y = MARGIN_PX + depth * LEVEL_PX
        for child in node.children:
            place(child, depth + 1)
        if node.children:
            node.x = (node.children[0].x + node.children[-1].x) / 2
        else:
            node.x = MARGIN_PX + next_slot * SLOT_PX
            next_slot += 1

    for root in roots:
        place(root, 0)
    return next_slot


def _colour(nodes: list[TreeNode]) -> TreeNode | None:
    """Fill each node's colour; mark the best path; return the best node."""
    scored = [node for node in nodes if node.score_ms is not None and node.score_ms > 0]
    low = min((math.log(node.score_ms) for node in scored), default=0.0)
    high = max((math.log(node.score_ms) for node in scored), default=0.0)
    for node in nodes:
        if node.is_step:
            node.colour = NO_CHILD_COLOUR
        elif node.score_ms is not None and node.score_ms > 0:
            share = (math.log(node.score_ms) - low) / (high - low) if high > low else 0.0
            node.colour = _gradient(share)
        elif node.status not in ("pass", "not_run"):
            node.colour = FAILED_COLOUR
    best = min(scored, key=lambda node: (node.score_ms, node.revision_id), default=None)
    by_key = {node.key: node for node in nodes}
    walk = best
    while walk is not None:
        walk.on_best_path = True
        walk = by_key.get(walk.parent_key) if walk.parent_key else None
    return best


def _gradient(share: float) -> str:
    if share <= 0.5:
        start, end, t = BEST_COLOUR, MIDDLE_COLOUR, share * 2
    else:
        start, end, t = MIDDLE_COLOUR, SLOWEST_COLOUR, (share - 0.5) * 2
    red, green, blue = (round(a + (b - a) * t) for a, b in zip(start, end))
    return f"#{red:02x}{green:02x}{blue:02x}"


def render_experiment_html(session: Session, experiment_id: int) -> str:
    """The page (module docstring)."""
    from harness.report.html import template_environment

    experiment = get_experiment(session, experiment_id)
    tree = build_tree(session, experiment_id)
    return (
        template_environment()
        .get_template("experiment.html.j2")
        .render(
            experiment=experiment,
            settings=ExperimentSettings.model_validate(experiment.settings),
            summary=summarize_experiment(experiment),
            tree=tree,
            by_key={node.key: node for node in tree.nodes},
            radius=RADIUS_PX,
            format_ms=format_ms,
        )
    )
