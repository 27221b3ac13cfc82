"""A rich progress bar for the tournament: one bar per phase (revisions or revision x shape steps),
with elapsed and remaining time, on stderr so that stdout keeps only the results."""

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
from typing_extensions import Self

from harness.plan.tournament import TournamentProgress


class RichTournamentProgress(TournamentProgress):
    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[phase]:<11}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.description}", markup=False),
            console=console,
        )
        self.current: TaskID | None = None

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start_phase(self, phase: str, steps: int) -> None:
        self.current = self.progress.add_task("", total=steps, phase=phase)

    def step(self, description: str, advance: int = 1) -> None:
        if self.current is not None:
            self.progress.update(self.current, advance=advance, description=description)
            if not self.progress.console.is_terminal:  # a log file gets one line per step instead
                phase = self.progress.tasks[self.current].fields["phase"]
                self.progress.console.print(f"{phase}: {description}", highlight=False, markup=False)

    def end_phase(self) -> None:
        if self.current is not None:
            task = self.progress.tasks[self.current]
            self.progress.update(self.current, completed=task.total, description="done")
        self.current = None
