"""`harness evolve` on a terminal: a live line per step in flight (proposing, evaluating and
what its evaluation is doing, for how long), each finished step's outcome printed above them."""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text
from typing_extensions import Self

from harness.evolve.experiment import ExperimentEvents
from harness.report.text import escape_controls


class LiveEvents(ExperimentEvents):
    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total = console, total
        self.lock = threading.Lock()
        self.in_flight: dict[int, tuple[str, float]] = {}  # generation -> (state, since)
        self.live = Live(console=console, get_renderable=self._table, refresh_per_second=4, transient=True)

    def __enter__(self) -> Self:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def _table(self) -> Table:
        table = Table.grid(padding=(0, 1))
        now = time.monotonic()
        with self.lock:
            rows = sorted(self.in_flight.items())
        for generation, (state, since) in rows:
            table.add_row(
                Text(f"generation {generation}/{self.total}", style="bold"),
                Text(f"{now - since:5.0f} s", style="dim"),
                Text(escape_controls(state)),
            )
        return table

    def note(self, line: str) -> None:
        self.live.console.print(Text(escape_controls(line)))

    def step(self, generation: int, state: str) -> None:
        with self.lock:
            kind = state.split(":")[0]
            previous = self.in_flight.get(generation)
            since = (
                previous[1]
                if previous is not None and previous[0].split(":")[0] == kind
                else time.monotonic()
            )
            self.in_flight[generation] = (state, since)

    def landed(self, generation: int, line: str) -> None:
        with self.lock:
            self.in_flight.pop(generation, None)
        self.live.console.print(Text(f"generation {generation}/{self.total}: {escape_controls(line)}"))
