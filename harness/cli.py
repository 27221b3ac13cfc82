"""Thin typer commands: parse options, call one function, print. No logic lives here.

Each concern keeps its commands in its own section below; `main` turns a `HarnessError` or a
usage error into one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.exceptions import Abort, Exit, TyperException
from rich.console import Console

from harness.errors import HarnessError

app = typer.Typer(
    help="Kernel evolution harness: register revisions, check and time them, rank them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


@app.callback()
def _root() -> None:
    """Kernel evolution harness: register revisions, check and time them, rank them."""

DbOption = Annotated[
    Optional[str],
    typer.Option("--db", envvar="HARNESS_DB", help="SQLAlchemy URL of the store (default: db/harness.sqlite)."),
]


# --- store and registration (issue 2) -------------------------------------------------------


@app.command()
def version() -> None:
    """Print the harness version."""
    from harness import __version__

    console.print(__version__)


# --- runner and timing (issues 3, 4) ---------------------------------------------------------


# --- tournament and reports (issue 5) -------------------------------------------------------


def main() -> None:
    try:
        app(standalone_mode=False)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Abort:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except TyperException as exc:
        message = exc.format_message()
        if message:  # an empty message follows the help text printed for a bare `harness`
            print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
