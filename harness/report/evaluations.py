"""What `harness test`, `harness bench` and `harness show` print about stored runs: tables that
fit the width they are given, and the `--format json` models (`RunReport`, `ShapeReport`).

A reason is never squeezed into a table column: the tables hold the short facts (status, the
per-shape figures) and each reason follows as one line of its own, wrapped by the terminal.
Names and reasons from the store are shown with their control characters escaped (a reason's
line breaks too: it stays one line), harness.report.text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from harness.devices import default_shape_set
from harness.report.leaderboard import format_ms, format_speedup
from harness.report.terminal import plain_table
from harness.report.text import escape_controls
from harness.tasks.spec import parameter_text
from harness.verdicts import VERDICT_WORDS, VERDICTS

if TYPE_CHECKING:
    from harness.environment import Environment
    from harness.plan.phases import PlannedRevision
    from harness.store.models import Revision, Run, ShapeResult

STATUS_STYLE = {"pass": "green", "wrong_answer": "red", "unsupported": "yellow"}
STATISTICS = ("runs", "mean_ms", "median_ms", "std_ms", "err_ms", "min_ms", "max_ms")
# Statuses that are no failure of the revision: it passed, or it cannot run on this device (like
# a skipped test).
NOT_FAILED = ("pass", "unsupported")


class ShapeReport(BaseModel):
    """One shape of a run: its check status, reason, verdicts, errors and timing statistics."""

    set: str
    index: int
    shape: dict[str, Any]
    status: str
    reason: str
    verdicts: dict[str, str]
    max_abs_err: float | None
    rel_l2: float | None
    runs: int | None
    mean_ms: float | None
    err_ms: float | None


class RunReport(BaseModel):
    """One stored run of a revision (`--format json` of test, bench and show)."""

    submission_id: int
    revision: str
    mode: str | None = None
    device: str | None = None
    status: str | None
    reason: str = ""
    score_ms: float | None = None
    stored: bool = False
    speedup_vs_reference: float | None = None
    vs_reference: str | None = None
    vs_parent: str | None = None
    flags: list[str] = []
    # shapes kept from an interrupted evaluation of this run and taken over, not evaluated again
    resumed_shapes: list[int] = []
    shapes: list[ShapeReport] = []


def shape_report(shape: ShapeResult) -> ShapeReport:
    verdicts = shape.verdicts
    return ShapeReport(
        set=shape.set_name,
        index=shape.index,
        shape=shape.shape,
        status=shape.status,
        reason=shape.reason,
        verdicts={} if verdicts is None else {name: verdicts.get(name).status for name in VERDICTS},
        max_abs_err=shape.check.max_abs_err,
        rel_l2=shape.check.rel_l2,
        runs=shape.runs,
        mean_ms=shape.mean_ms,
        err_ms=shape.err_ms,
    )


def run_report(submission_id: int, label: str, run: Run | None, **extra: Any) -> RunReport:
    if run is None:
        return RunReport(submission_id=submission_id, revision=label, status=None, **extra)
    return RunReport(
        submission_id=submission_id,
        revision=label,
        mode=run.mode,
        device=run.device_name or run.device,
        status=run.status,
        reason=run.reason or verdict_reason(run),
        score_ms=run.score_ms,
        resumed_shapes=(run.details or {}).get("resumed_shapes") or [],
        shapes=[shape_report(shape) for shape in run.shapes],
        **extra,
    )


def reports_json(reports: list[RunReport]) -> str:
    return "[" + ",\n".join(report.model_dump_json(indent=2) for report in reports) + "]\n"


def any_failed(items: list[PlannedRevision]) -> bool:
    """Whether a revision failed (exit code 1): a run whose status is neither a pass nor
    `unsupported`, or a worker that failed to give a result (a claim held by another worker is
    no failure)."""
    return any(item.failed or (item.run is not None and item.run.status not in NOT_FAILED) for item in items)


def verdict_reason(run: Run) -> str:
    """A passing run's first failing verdict, in words (it passes the other one)."""
    if run.status != "pass":
        return ""
    for shape in run.shapes:
        if shape.verdicts is not None and shape.verdicts.failing():
            return f"{shape.set_name}[{shape.index}]: {shape.verdicts.reasons()}"
    return ""


def _shape_lines(run: Run) -> str:
    """One line per shape that ran: index, max abs error / relative L2 error (or its status)."""
    lines = []
    for shape in run.shapes:
        status = shape.status
        if status == "not_run":
            continue
        numbers = "/".join(
            "-" if value is None else f"{value:.1e}"
            for value in (shape.check.max_abs_err, shape.check.rel_l2)
        )
        failing = shape.verdicts.failing() if shape.verdicts is not None else []
        note = (
            f" fails {' and '.join(VERDICT_WORDS[name] for name in failing)}"
            if status == "pass" and failing
            else ""
        )
        lines.append(f"{shape.index}: {numbers}" + ("" if status == "pass" else f" {status}") + note)
    return "\n".join(lines)


def _reason_line(submission_id: int, label: str, reason: str) -> Text:
    line = Text(f"{submission_id} {escape_controls(label)}: ", style="bold")
    line.append(escape_controls(reason))
    return line


def render_checks(checked: list[PlannedRevision]) -> Group:
    """id, lineage rN, status, per shape (max abs error / relative L2 error); then each reason on
    a line of its own. Text from the store goes in as `Text`: brackets are not markup."""
    table = plain_table()
    table.add_column("id", no_wrap=True, justify="right")
    table.add_column("revision", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("shape: max abs/rel L2", no_wrap=True)
    reasons: list[Text] = []
    for item in checked:
        run = item.run
        if run is None:
            what = item.busy_with if item.failed else f"claimed by {item.busy_with}"
            status = Text("no result", "magenta") if item.failed else Text("busy")
            table.add_row(str(item.revision_id), Text(escape_controls(item.label)), status, "")
            reasons.append(_reason_line(item.revision_id, item.label, what))
            continue
        status = Text(run.status or "", STATUS_STYLE.get(run.status or "", "magenta"))
        if item.reused:
            status.append(" (stored)")
        table.add_row(str(item.revision_id), Text(escape_controls(item.label)), status, _shape_lines(run))
        reason = run.reason or verdict_reason(run)
        if reason:
            reasons.append(_reason_line(item.revision_id, item.label, reason))
    return Group(table, *reasons)


def render_summary(checked: list[PlannedRevision], device: str) -> Text:
    """Which device and sandbox the results come from, and how many were stored already."""
    runs = [item.run for item in checked if item.run is not None]
    if not runs:
        return Text(f"device: {device}")
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
    resumed = [item for item in checked if item.resumed and not item.reused and item.run is not None]
    if resumed:
        shapes = sum(item.resumed for item in resumed)
        lines.append(
            f"{len(resumed)} resumed from an interrupted check: {shapes} shapes kept, the rest checked now"
        )
    return Text("\n".join(lines))


def checks_json(checked: list[PlannedRevision]) -> str:
    return reports_json(
        [run_report(item.revision_id, item.label, item.run, stored=item.reused) for item in checked]
    )


# --- bench ----------------------------------------------------------------------------------


def shape_keys(run: Run) -> list[str]:
    return [key for key in (run.shapes[0].shape if run.shapes else {}) if key != "seed"]


def bench_heading(item: PlannedRevision) -> Text:
    """`12 conv2d_x r2: pass; score 1.234 ms; ...`: status, score and comparisons."""
    run = item.run
    title = f"{item.revision_id} {escape_controls(item.label)}" + (
        " (reference)" if item.is_reference else ""
    )
    if run is None:
        what = item.busy_with if item.failed else f"busy, claimed by {item.busy_with}"
        return Text(f"{title}: {what}")
    facts = [run.status or ""]
    if run.reason:
        facts.append(escape_controls(run.reason))
    if run.score_ms is not None:
        facts.append(f"score {format_ms(run.score_ms)} ms")
        warmup_s = sum(shape.warmup_s for shape in run.shapes)
        facts.append(f"import {run.compile_s or 0:.1f} s, warm-up {warmup_s:.1f} s")
    if item.speedup is not None and not item.is_reference:
        facts.append(f"{format_speedup(item.speedup)} the reference's speed ({item.vs_reference})")
    elif item.speedup_note is not None and not item.is_reference:
        facts.append(f"no speedup: {item.speedup_note}")
    if item.vs_parent is not None:
        facts.append(f"vs parent: {item.vs_parent}")
    if item.flags:
        facts.append(f"flags: {escape_controls(', '.join(item.flags))}")
    if item.reused:
        facts.append("stored result")
    heading = Text(f"{title}: ")
    heading.append(facts[0], "bold")
    heading.append("".join(f"; {fact}" for fact in facts[1:]))
    return heading


def shape_table(item: PlannedRevision) -> Table | None:
    """One revision's per-shape statistics (ms)."""
    run = item.run
    if run is None:
        return None
    table = plain_table()
    keys = shape_keys(run)
    table.add_column("shape", no_wrap=True)
    for name in STATISTICS:
        table.add_column(name.removesuffix("_ms") + (" ms" if name.endswith("_ms") else ""), justify="right")
    for shape in run.shapes:
        label = ",".join(parameter_text(shape.shape.get(key, "")) for key in keys)
        status = shape.status
        if shape.mean_ms is None:
            table.add_row(label, status or "-", *[""] * (len(STATISTICS) - 1))
            continue
        table.add_row(label, str(shape.runs), *[format_ms(getattr(shape, name)) for name in STATISTICS[1:]])
    return table


def render_bench(benched: list[PlannedRevision], environment: Environment) -> Group:
    """The device line, the shape legend, then each revision's heading and table."""
    device = f"{environment.device} ({environment.device_name})"
    if environment.device == "cpu":
        device += ": host clock, Triton through the interpreter; never ranked with GPU results"
    lines = [f"device: {device}"]
    keys = next((shape_keys(item.run) for item in benched if item.run is not None and item.run.shapes), [])
    if keys:
        lines.append(f"shape: {','.join(keys)}; times in ms")
    parts: list[RenderableType] = [Text(line) for line in lines]
    for item in benched:
        parts.append(Text(""))
        parts.append(bench_heading(item))
        table = shape_table(item)
        if table is not None:
            parts.append(table)
    return Group(*parts)


def bench_json(benched: list[PlannedRevision]) -> str:
    return reports_json(
        [
            run_report(
                item.revision_id,
                item.label,
                item.run,
                stored=item.reused,
                speedup_vs_reference=item.speedup,
                vs_reference=item.vs_reference,
                vs_parent=item.vs_parent,
                flags=item.flags,
            )
            for item in benched
        ]
    )


# --- list and show --------------------------------------------------------------------------


def revision_record(revision: Revision, *, full: bool = False) -> dict[str, Any]:
    """A revision's metadata for `--format json` (`full`: `show`'s file, hash, directives, entry
    point and syntax error too)."""
    record: dict[str, Any] = {
        "submission_id": revision.id,
        "lineage": revision.lineage.name,
        "revision": revision.number,
        "parent_id": revision.parent_id,
        "task": revision.task,
        "author": revision.author,
        "created_at": revision.created_at.isoformat(),
        "flags": list(revision.flags),
        "message": revision.message,
    }
    if full:
        record |= {
            "file": revision.filename,
            "sha256": revision.code_sha256,
            "directives": dict(revision.directives),
            "entry_point": revision.entry_point,
            "syntax_error": revision.syntax_error,
        }
    return record


def render_runs(reports: list[RunReport]) -> str:
    """`harness show`'s results: per stored run (mode, device), status, score and reason, then
    each shape's status and reason (control characters escaped, one line each)."""
    if not reports:
        return "results:    none yet (`harness test ID` checks it)"
    lines = ["results:"]
    for report in reports:
        score = f", {format_ms(report.score_ms)} ms" if report.score_ms is not None else ""
        reason = f": {escape_controls(report.reason)}" if report.reason else ""
        lines.append(f"  {report.mode} on {report.device}: {report.status}{score}{reason}")
        for shape in report.shapes:
            timing = f" {format_ms(shape.mean_ms)} ms" if shape.mean_ms is not None else ""
            why = f": {escape_controls(shape.reason)}" if shape.reason and shape.status != "pass" else ""
            lines.append(f"    {shape.set}[{shape.index}] {shape.status}{timing}{why}")
    return "\n".join(lines)
