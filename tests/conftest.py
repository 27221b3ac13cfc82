"""Fixtures shared by the test modules: a fresh SQLite store URL, the CLI in a subprocess, and a
dump of a store's rows (to check that a rejected command wrote nothing)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HARNESS_SCRIPT = Path(sys.executable).parent / "harness"


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """The URL of a SQLite store in this test's tmp dir (the file does not exist yet)."""
    return f"sqlite:///{tmp_path / 'store.sqlite'}"


@pytest.fixture
def run_cli(store_url: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the `harness` console script with HARNESS_DB=store_url: `run_cli("list", "--task",
    "conv2d_v2", env={...}, cwd=...)` returns the CompletedProcess (text output, not checked)."""

    def run(
        *args: object, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "HARNESS_DB": store_url, **(env or {})}
        return subprocess.run(
            [str(HARNESS_SCRIPT), *(str(arg) for arg in args)],
            capture_output=True,
            text=True,
            env=environment,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def dump_store() -> Callable[[str], list[str]]:
    """`dump_store(sqlite_url)`: every row and table of a SQLite store as SQL lines ([] when the
    file does not exist), for before/after comparisons."""

    def dump(url: str) -> list[str]:
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            return []
        connection = sqlite3.connect(path)
        try:
            return list(connection.iterdump())
        finally:
            connection.close()

    return dump


@pytest.fixture
def process_gone() -> Callable[[int], bool]:
    """`process_gone(pid)`: True once the process has ended, waiting up to 5 s for it; a zombie
    that only waits for its parent to reap it counts as ended."""
    import time  # appended section: conftest's imports belong to its other users

    def gone(pid: int) -> bool:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                return True
            if state == "Z":
                return True
            time.sleep(0.05)
        return False

    return gone
