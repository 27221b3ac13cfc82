"""`harness experiments show ID --format html`: one self-contained page with the tree of the
experiment's revisions (inline SVG and CSS, a few lines of inline script, no external assets).

Nodes: the revisions the experiment started from, every child it registered, and, as small grey
squares, the steps that produced no child (the proposer failed, the edit did not apply, nothing
new), each under its parent. Edges go parent -> child. Scores are the experiment's own: a
child's from the interleaved run that timed it beside its parent, a root's from the first such
run it was timed in as a parent (never a leaderboard score from another run: drift between runs
is no difference). A child's colour is its comparison with its parent in that run, noise
included (harness.scoring): green faster, pale same within noise, orange slower; red when it
fails, white when it has no result or no comparison; a root is blue. The best path (drawn thick
and gold) leads from a root to the fastest revision reached by steps that were each faster or
the same within noise, at least one faster; when no step was faster there is none. Clicking a
node opens its panel below the tree: the step's template, parent and proposer, the prompt's
summary, the outcome, the diff against the parent (coloured), and the prompt, reply and proposer
stderr folded.

Layout (computed here): depth = distance from the root, leaves one slot apart in the order of
a depth-first walk (children by id), a parent centred over its children.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from harness.evolve import outcomes
from harness.evolve.experiment import ExperimentSettings, _standings, describe_outcome, get_experiment
from harness.evolve.story import summarize_experiment
from harness.report.diff import DiffLine, diff_lines
from harness.report.history import diff_inputs
from harness.report.leaderboard import format_ms
from harness.scoring import FASTER, SAME, SLOWER
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
ROOT_COLOUR = "#9ecae1"
COMPARISON_COLOURS = {FASTER: "#1a9850", SAME: "#f2f0e6", SLOWER: "#f46d43"}


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
    vs_parent: str | None = None  # against its parent in the run that timed both (children)
    colour: str = NOT_RUN_COLOUR
    on_best_path: bool = False

    @property
    def is_step(self) -> bool:
        return self.revision_id is None

    @property
    def title(self) -> str:
        score = f", {format_ms(self.score_ms)} ms" if self.score_ms is not None else ""
        compared = f", {self.vs_parent} than its parent" if self.vs_parent in (FASTER, SLOWER) else ""
        compared = f", {SAME} of its parent" if self.vs_parent == SAME else compared
        return f"{self.label}: {self.status}{score}{compared}"


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
            label=f"submission {revision_id} ({revision.lineage.name} r{revision.number})",
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
    """Fill each node's colour from its comparison with its parent; mark the best path (module
    docstring); return the best node (None: no step was faster than its parent)."""
    by_key = {node.key: node for node in nodes}
    for node in nodes:
        if node.is_step:
            node.colour = NO_CHILD_COLOUR
        elif node.status not in ("pass", "not_run"):
            node.colour = FAILED_COLOUR
        elif node.step is None:
            node.colour = ROOT_COLOUR
        elif node.status == "pass":
            node.colour = COMPARISON_COLOURS.get(node.vs_parent or "", NOT_RUN_COLOUR)

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
            colours={
                "faster": COMPARISON_COLOURS[FASTER],
                "same": COMPARISON_COLOURS[SAME],
                "slower": COMPARISON_COLOURS[SLOWER],
                "failed": FAILED_COLOUR,
                "not_run": NOT_RUN_COLOUR,
                "root": ROOT_COLOUR,
                "no_child": NO_CHILD_COLOUR,
            },
        )
    )
