"""A rich progress bar for the tournament: one bar per phase (revisions or revision x shape steps),
with elapsed and remaining time, and what is going on now: how many revisions are building (their
children start and import them), how many are being checked (side by side in the test phase), and
which one is timed (one at a time); on stderr so that stdout keeps only the results. Revision
labels and step descriptions are shown with their control characters escaped."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from typing_extensions import Self

from harness.plan.tournament import PhaseResult, TournamentProgress
from harness.report.text import escape_controls


def phase_summary(phase: PhaseResult) -> str:
    """`benchmark: 3 revisions, 3 evaluated now, ... (the task's reference included)`: the counts
    cover every revision of the phase, the reference too when the phase timed it."""
    total = phase.evaluated + phase.reused + phase.busy + len(phase.failures)
    note = " (the task's reference included)" if total > len(phase.revision_ids) else ""
    if phase.resumed_shapes:
        note += f"; {phase.resumed_shapes} shapes kept from an interrupted run, not run again"
    return (
        f"{phase.phase}: {total} revisions, {phase.evaluated} evaluated now, {phase.reused} reused, "
        f"{phase.busy} held by other workers, {len(phase.passed)} passed{note}"
    )


def _shared() -> Column:
    """A text column that takes an equal share of what the fixed ones leave, cut with an ellipsis."""
    return Column(no_wrap=True, overflow="ellipsis", ratio=1, min_width=0)


class RichTournamentProgress(TournamentProgress):
    def __init__(self, console: Console) -> None:
        # The phase, the bar, the counter and the times keep their widths at any terminal width;
        # what is going on now and the last step share what is left, cut with an ellipsis.
        fixed = Column(no_wrap=True)
        self.progress = Progress(
            TextColumn("[bold]{task.fields[phase]:<11}", table_column=fixed),
            BarColumn(bar_width=24, table_column=fixed),
            MofNCompleteColumn(table_column=fixed),
            TimeElapsedColumn(table_column=fixed),
            TextColumn("left", table_column=fixed),
            TimeRemainingColumn(table_column=fixed),
            TextColumn("{task.fields[now]}", markup=False, table_column=_shared()),
            TextColumn("{task.description}", markup=False, table_column=_shared()),
            console=console,
            expand=True,
        )
        self.current: TaskID | None = None
        self.activities: dict[str, str] = {}  # revision label -> building | checking | timing | waiting

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()

    @property
    def started(self) -> bool:
        return bool(self.progress.tasks)

    def start_phase(self, phase: str, steps: int) -> None:
        """The bars start with the first phase: a command refused before it prints nothing (no
        empty line above its error)."""
        if not self.started:
            self.progress.start()
        self.activities.clear()
        self.current = self.progress.add_task("", total=steps, phase=phase, now="")

    def set_steps(self, steps: int) -> None:
        if self.current is not None:
            self.progress.update(self.current, total=steps)

    def step(self, description: str, advance: int = 1) -> None:
        description = escape_controls(description)
        if self.current is not None:
            self.progress.update(self.current, advance=advance, description=description)
            if not self.progress.console.is_terminal:  # a log file gets one line per step instead
                phase = self.progress.tasks[self.current].fields["phase"]
                self.progress.console.print(f"{phase}: {description}", highlight=False, markup=False)

    def activity(self, label: str, activity: str) -> None:
        label = escape_controls(label)
        if activity == "done":
            self.activities.pop(label, None)
        else:
            self.activities[label] = activity
        if self.current is not None:
            self.progress.update(self.current, now=self.now_text())

    def now_text(self) -> str:
        """ "building 2 · checking 3 · timing conv2d_v2_reference r1": the counts, and the revision
        timed (one at a time)."""
        parts = []
        for activity in ("building", "checking", "timing"):
            labels = [label for label, now in self.activities.items() if now == activity]
            if len(labels) == 1 and activity == "timing":
                parts.append(f"timing {labels[0]}")
            elif labels:
                parts.append(f"{activity} {len(labels)}")
        return " · ".join(parts)

    def end_phase(self) -> None:
        if self.current is not None:
            task = self.progress.tasks[self.current]
            self.progress.update(self.current, completed=task.total, description="done", now="")
        self.current = None
