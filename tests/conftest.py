"""Fixtures shared by the test modules: a fresh SQLite store URL, the CLI in a subprocess, a
dump of a store's rows (to check that a rejected command wrote nothing), and a fresh PostgreSQL
database (or each kind of store in turn) on the server that HARNESS_TEST_POSTGRES_URL names."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HARNESS_SCRIPT = Path(sys.executable).parent / "harness"


def rows(store_url: str, query: str, *parameters: object) -> list[tuple]:
    """The rows a query returns from a SQLite store (a URL `sqlite:///PATH`)."""
    connection = sqlite3.connect(store_url.removeprefix("sqlite:///"))
    try:
        return connection.execute(query, parameters).fetchall()
    finally:
        connection.close()


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


# --- PostgreSQL (issue 7): a fresh database per test on the server of HARNESS_TEST_POSTGRES_URL ---


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL database, dropped after the test, on the server that
    HARNESS_TEST_POSTGRES_URL names (`.ci/postgres.sh` starts a throwaway one and sets it). Without
    the variable the test is skipped, unless HARNESS_REQUIRE_POSTGRES=1 (CI), where it fails."""
    import uuid

    from sqlalchemy import create_engine, make_url
    from sqlalchemy.exc import SQLAlchemyError

    server = os.environ.get("HARNESS_TEST_POSTGRES_URL", "")
    if not server:
        message = "HARNESS_TEST_POSTGRES_URL is not set (start a server with .ci/postgres.sh)"
        if os.environ.get("HARNESS_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"HARNESS_REQUIRE_POSTGRES=1 but {message}", pytrace=False)
        pytest.skip(message)
    name = f"harness_test_{uuid.uuid4().hex[:16]}"
    try:
        admin = create_engine(server, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except (SQLAlchemyError, ImportError) as exc:
        pytest.fail(f"cannot create a database on {server}: {str(exc).splitlines()[0]}", pytrace=False)
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test that takes it runs twice: on a fresh SQLite store in tmp_path and on a fresh
    PostgreSQL database (`postgres_url`: skipped when there is no server)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return request.getfixturevalue("postgres_url")
