"""What `harness bench` prints: the device line, the shape legend, then one table per revision
with its per-shape statistics (harness.plan.bench makes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from harness.environment import Environment
from harness.store.models import Run
from harness.timing import ms_text
from harness.wire import TIMING_STATISTICS as STATISTICS

if TYPE_CHECKING:
    from harness.plan.phases import PlannedRevision



def shape_table(item: PlannedRevision) -> Table:
    """One revision's per-shape statistics (ms), titled with its status, score and comparisons."""
    run = item.run
    title = f"{item.revision_id} {item.label}" + (" (reference)" if item.is_reference else "")
    if run is None:
        what = item.busy_with if item.failed else f"busy, claimed by {item.busy_with}"
        table = Table(title=Text(f"{title}: {what}"), title_justify="left")
        return table
    facts = [run.status]
    if run.reason:
        facts.append(run.reason)
    if run.score_ms is not None:
        facts.append(f"score {ms_text(run.score_ms)} ms")
        warmup_s = sum(shape.warmup_s for shape in run.shapes)
        facts.append(f"import {run.compile_s or 0:.1f} s, warm-up {warmup_s:.1f} s")
    if item.speedup is not None and not item.is_reference:
        facts.append(f"{item.speedup:.2f}x the reference ({item.vs_reference})")
    if item.vs_parent is not None:
        facts.append(f"vs parent: {item.vs_parent}")
    if item.flags:
        facts.append(f"flags: {', '.join(item.flags)}")
    if item.reused:
        facts.append("stored result")
    heading = Text(f"{title}: ")
    heading.append(facts[0], "bold")
    heading.append("".join(f"; {fact}" for fact in facts[1:]))
    table = Table(title=heading, title_justify="left")
    keys = shape_keys(run)
    table.add_column("shape", no_wrap=True)
    for name in STATISTICS:
        table.add_column(name.removesuffix("_ms") + (" ms" if name.endswith("_ms") else ""), justify="right")
    for shape in run.shapes:
        label = ",".join(str(shape.shape.get(key, "")) for key in keys)
        status = shape.check.get("status", "")
        if shape.mean_ms is None:
            table.add_row(label, status or "-", *[""] * (len(STATISTICS) - 1))
            continue
        table.add_row(label, str(shape.runs), *[ms_text(getattr(shape, name)) for name in STATISTICS[1:]])
    return table


def shape_keys(run: Run) -> list[str]:
    return [key for key in (run.shapes[0].shape if run.shapes else {}) if key != "seed"]


def render_bench(benched: list[PlannedRevision], environment: Environment) -> Group:
    """The device line, the shape legend, then one table per revision."""
    device = f"{environment.device} ({environment.device_name})"
    if environment.device == "cpu":
        device += ": host clock, Triton through the interpreter; never ranked with GPU results"
    lines = [f"device: {device}"]
    keys = next((shape_keys(item.run) for item in benched if item.run is not None and item.run.shapes), [])
    if keys:
        lines.append(f"shape: {','.join(keys)}; times in ms")
    return Group(*(Text(line) for line in lines), *[shape_table(item) for item in benched])
