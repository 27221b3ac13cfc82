"""An evolution experiment rendered: the list (`harness experiments`), one experiment's story,
step by step (`harness experiments show ID`), and its page (`--format html`). harness.evolve
reads the experiment back and computes what is shown (`ExperimentView`, the tree's nodes and its
best path: harness.evolve.story, harness.evolve.tree); this module only renders, and imports
nothing of harness.evolve, which imports the reports.

What a proposer replied or wrote to stderr, the prompts (a candidate's code and errors) and the
names are shown with their control characters escaped (harness.report.text): in the table all of
them, in the story all but line breaks and tabs, on the page by the templates.

The page is self-contained (inline SVG and CSS, a few lines of inline script, no external
assets): the tree of the experiment's revisions, each under its parent, and, as small grey
squares, the steps that produced no child. A child's colour is its comparison with its parent in
the run that timed both, noise included (harness.scoring): green faster, pale same within noise,
orange slower; red when it fails, white when it has no result or no comparison; a root is blue.
The best path is drawn thick and gold. Clicking a node opens its panel below the tree: the
step's template, parent and proposer, the prompt's summary, the outcome, the diff against the
parent (coloured), and the prompt, reply and proposer stderr folded.

Layout: depth = distance from the root, leaves one slot apart in the order of a depth-first walk
(children by id), a parent centred over its children.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from rich import box
from rich.table import Table
from rich.text import Text

from harness.report.diff import DiffLine
from harness.report.leaderboard import format_ms
from harness.report.text import escape_controls
from harness.scoring import FASTER, SAME, SLOWER
from harness.store.models import Experiment, ExperimentStep

PREVIEW_LINES = 6
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


class ShownSettings(Protocol):
    """What the story and the page show of an experiment's settings (harness.evolve's
    `ExperimentSettings`)."""

    generations: int
    population: int
    seed: int
    device: str
    proposer_timeout_s: float
    max_fix_attempts: int
    parallel: int
    gpus: str | None


@dataclass(frozen=True)
class ExperimentView:
    """One experiment as harness.evolve read it back (`experiment_view`)."""

    experiment: Experiment  # with its steps
    settings: ShownSettings
    summary: ExperimentSummary
    steps_window: int  # steps launched and not landed, at most (harness.evolve.experiment)


def describe_outcome(step: ExperimentStep) -> str:
    """One line: what the generation produced, and how the child compares with its parent in
    the interleaved run that timed them together."""
    if step.child_id is None or step.status == "duplicate":  # harness.evolve.outcomes.DUPLICATE
        return f"{step.status}: {step.reason}"
    text = f"submission {step.child_id}: {step.status}"
    if step.score_ms is not None:
        text += f", {format_ms(step.score_ms)} ms"
    if step.vs_parent:
        text += (
            f", {step.vs_parent} than its parent"
            if step.vs_parent != SAME
            else ", same as its parent within noise"
        )
        if step.compared_in:
            parent = (
                f", the parent {format_ms(step.parent_score_ms)} ms"
                if step.parent_score_ms is not None
                else ""
            )
            text += f" (timed together in run {step.compared_in}{parent})"
    elif step.score_ms is not None:
        text += ", not compared with its parent in one run"
    if step.status != "pass" and step.reason:
        text += f" ({step.reason})"
    return text


# --- the list and the story ----------------------------------------------------------------------


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


def render_story(view: ExperimentView, *, full: bool = False) -> str:
    """The experiment's settings and outcome, then each generation: parent and template, what the
    proposer said and cost, and what became of the child. `full` adds every prompt and reply."""
    experiment, settings, summary = view.experiment, view.settings, view.summary
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
            f"{view.steps_window}; generation g chose its parent seeing the "
            f"children of the first g-{view.steps_window} arrivals"
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


# --- the page ----------------------------------------------------------------------------------


@dataclass
class TreeNode:
    """A revision of the experiment, or a step without a child; harness.evolve.tree says what it
    is and marks the best path, `lay_out_tree` where it stands and its colour."""

    key: str  # "r<id>" for a revision, "s<generation>" for a step without a child
    label: str
    parent_key: str | None
    status: str
    score_ms: float | None = None
    revision_id: int | None = None
    step: ExperimentStep | None = None
    outcome: str = ""
    diff: list[DiffLine] = field(default_factory=list)
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

    @property
    def prompt_summary(self) -> str:
        """The headings and first lines of the prompt the proposer read ("" for a root)."""
        if self.step is None:
            return ""
        prompt = self.step.prompt
        lines = [line for line in prompt.split("\n") if line.strip()]
        headings = [line for line in lines if line.startswith("#")]
        shown = headings[:PROMPT_SUMMARY_LINES] or lines[:PROMPT_SUMMARY_LINES]
        return "\n".join(shown) + f"\n({len(prompt.split(chr(10)))} lines in all)"


@dataclass
class ExperimentTree:
    nodes: list[TreeNode]
    width: int
    height: int
    best: TreeNode | None


def lay_out_tree(nodes: list[TreeNode], best: TreeNode | None) -> ExperimentTree:
    """The nodes (each with its `parent_key`) linked to their children, placed and coloured;
    `best` ends the best path (None: there is none)."""
    by_key = {node.key: node for node in nodes}
    for node in nodes:
        if node.parent_key is not None:
            by_key[node.parent_key].children.append(node)
    for node in nodes:
        node.children.sort(key=lambda child: (child.is_step, child.revision_id or 0, child.key))
    roots = sorted(
        (node for node in nodes if node.parent_key is None), key=lambda node: node.revision_id or 0
    )
    slots = _layout(roots)
    depth = max((node.y for node in nodes), default=0)
    for node in nodes:
        node.colour = _colour(node)
    return ExperimentTree(
        nodes=sorted(nodes, key=lambda node: (node.y, node.x)),
        width=int(2 * MARGIN_PX + max(slots - 1, 0) * SLOT_PX + SCORE_LABEL_PX),
        height=int(2 * MARGIN_PX + depth),
        best=best,
    )


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


def _colour(node: TreeNode) -> str:
    """From the node's comparison with its parent (module docstring)."""
    if node.is_step:
        return NO_CHILD_COLOUR
    if node.status not in ("pass", "not_run"):
        return FAILED_COLOUR
    if node.step is None:
        return ROOT_COLOUR
    if node.status == "pass":
        return COMPARISON_COLOURS.get(node.vs_parent or "", NOT_RUN_COLOUR)
    return NOT_RUN_COLOUR


def render_experiment_html(view: ExperimentView, tree: ExperimentTree) -> str:
    """The page (module docstring)."""
    from harness.report.html import template_environment  # jinja2, for the page only

    return (
        template_environment()
        .get_template("experiment.html.j2")
        .render(
            experiment=view.experiment,
            settings=view.settings,
            summary=view.summary,
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
