"""What `harness test` prints: the device and sandbox the results come from, then one row per
revision (harness.plan.checks makes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from harness.sandbox.devices import default_shape_set
from harness.store.models import Run
from harness.verdicts import VERDICT_WORDS

if TYPE_CHECKING:
    from harness.plan.phases import PlannedRevision

STATUS_STYLE = {"pass": "green", "wrong_answer": "red", "unsupported": "yellow"}


def _shape_lines(run: Run) -> str:
    """One line per shape that ran: index, max abs error / relative L2 error (or its status)."""
    lines = []
    for shape in run.shapes:
        status = shape.check.get("status", "")
        if status == "not_run":
            continue
        numbers = "/".join(
            "-" if value is None else f"{value:.1e}"
            for value in (shape.check.get("max_abs_err"), shape.check.get("rel_l2"))
        )
        failing = shape.verdicts.failing() if shape.verdicts is not None else []
        note = f" fails {' and '.join(VERDICT_WORDS[name] for name in failing)}" if status == "pass" and failing else ""
        lines.append(f"{shape.index}: {numbers}" + ("" if status == "pass" else f" {status}") + note)
    return "\n".join(lines)


def _verdict_reason(run: Run) -> str:
    """A passing run's first failing verdict, in words (it passes the other one)."""
    for shape in run.shapes:
        if shape.verdicts is not None and shape.verdicts.failing():
            return f"{shape.set_name}[{shape.index}]: {shape.verdicts.reasons()}"
    return ""


def render_checks(checked: list[PlannedRevision]) -> Table:
    """id, lineage rN, status, per shape (max abs error / relative L2 error), reason. Text from the
    store goes in as `Text`: brackets in a reason or a lineage's name are not markup."""
    table = Table()
    table.add_column("id", no_wrap=True)
    table.add_column("revision", overflow="fold", min_width=12)
    table.add_column("status", no_wrap=True)
    table.add_column("shape: max abs/rel L2", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for item in checked:
        run = item.run
        if run is None:
            if item.failed:
                table.add_row(
                    str(item.revision_id), Text(item.label), Text("no result", "magenta"), "", Text(item.busy_with)
                )
            else:
                table.add_row(str(item.revision_id), Text(item.label), "busy", "", Text(f"claimed by {item.busy_with}"))
            continue
        status = Text(run.status or "", STATUS_STYLE.get(run.status or "", "magenta"))
        if item.reused:
            status.append("\n(stored)")
        reason = run.reason or (_verdict_reason(run) if run.status == "pass" else "")
        table.add_row(str(item.revision_id), Text(item.label), status, _shape_lines(run), Text(reason))
    return table


def render_summary(checked: list[PlannedRevision], device: str) -> str:
    """Which device and sandbox the results come from, and how many were stored already."""
    runs = [item.run for item in checked if item.run is not None]
    if not runs:
        return f"device: {device}"
    environment = runs[0].environment
    where = f"{device} ({environment.get('device_name', '')})"
    if device == "cpu":
        where += ", Triton kernels through the interpreter"
    lines = [f"device: {where}; shapes: {runs[0].details.get('shape_set', default_shape_set(device))}"]
    isolation = next((run.details["isolation"] for run in runs if run.details.get("isolation")), "")
    if isolation:
        lines.append(f"sandbox: {isolation}")
    reused = sum(item.reused for item in checked)
    if reused:
        lines.append(f"{reused} of {len(checked)} stored from an earlier check here (--force checks again)")
    return "\n".join(lines)
