"""Fixtures shared by the test modules: a fresh SQLite store URL, the CLI in a subprocess, a
dump of a store's rows (to check that a rejected command wrote nothing), and a fresh PostgreSQL
database (or each kind of store in turn) on the server that HARNESS_TEST_POSTGRES_URL names.

Every test runs in a hermetic environment (`pytest_configure` below): HOME, the XDG folders and
the compile caches point into a fresh folder, and the user's HARNESS_* and RAY_* settings are
gone, for the tests and every process they start; SIGINT is not left ignored (a suite started in
the background)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

HARNESS_SCRIPT = Path(sys.executable).parent / "harness"

# Settings of the test run itself, kept: where the PostgreSQL tests find their server.
KEPT_HARNESS_VARIABLES = ("HARNESS_TEST_POSTGRES_URL", "HARNESS_REQUIRE_POSTGRES")
# The user's state that a test must not read: Ray's (~/.ray/auth_token, RAY_ADDRESS), the
# harness's settings and caches, compile caches, configuration and data folders.
HOME_VARIABLES = {
    "HOME": "home",
    "XDG_CONFIG_HOME": "home/.config",
    "XDG_CACHE_HOME": "home/.cache",
    "XDG_DATA_HOME": "home/.local/share",
    "XDG_STATE_HOME": "home/.local/state",
    "TRITON_CACHE_DIR": "home/.triton/cache",
    "TORCHINDUCTOR_CACHE_DIR": "home/.cache/torchinductor",
    "TORCH_EXTENSIONS_DIR": "home/.cache/torch_extensions",
}
# The user's terminal size and pager: tables and history are tested at the sizes the tests set.
TERMINAL_VARIABLES = ("COLUMNS", "LINES", "PAGER", "MANPAGER")
_saved_environment: dict[str, str] = {}


def hermetic_environment(root: Path, environment: dict[str, str]) -> dict[str, str]:
    """`environment` without the user's HARNESS_* (but the test run's own), RAY_* and terminal
    settings, with HOME, the XDG folders and the compile caches under `root`."""
    cleaned = {
        name: value
        for name, value in environment.items()
        if name not in TERMINAL_VARIABLES
        and not (
            name.startswith("RAY_") or (name.startswith("HARNESS_") and name not in KEPT_HARNESS_VARIABLES)
        )
    }
    for name, relative in HOME_VARIABLES.items():
        folder = root / relative
        folder.mkdir(parents=True, exist_ok=True)
        cleaned[name] = str(folder)
    return cleaned


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is imported (harness.config reads HOME when it is imported), the
    environment of this process, and so of every subprocess, becomes hermetic."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="harness-tests-"))
    _saved_environment.update(os.environ)
    _saved_environment["_HARNESS_TESTS_ROOT"] = str(root)
    os.environ.clear()
    os.environ.update(hermetic_environment(root, _saved_environment))
    # A shell without job control starts background commands (`pytest ... &`) with SIGINT
    # ignored, and an ignored SIGINT stays ignored in every process started from here: the tests
    # that stop a command with Ctrl-C would send it to nobody. A handler is reset to the default
    # in each new program.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    root = _saved_environment.pop("_HARNESS_TESTS_ROOT", None)
    if root is None:
        return
    os.environ.clear()
    os.environ.update(_saved_environment)
    shutil.rmtree(root, ignore_errors=True)


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


@contextmanager
def local_ray_cluster(temp: Path, *, gpus: int) -> Iterator[str]:
    """A local Ray head on this machine's CPUs that declares `gpus` GPUs (none is used), its files
    in `temp`; yields its address. `ray stop --force` at the end stops every Ray cluster of this
    machine."""
    ray = Path(sys.executable).parent / "ray"
    if not ray.exists():
        pytest.fail("ray is not installed in this environment: ./setup.sh installs the ray extra")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "RAY_TMPDIR": str(temp)}
    command = [
        str(ray), "start", "--head", "--port", str(port), "--num-cpus", "2", "--num-gpus", str(gpus),
        "--disable-usage-stats", "--include-dashboard", "false", "--object-store-memory", "200000000",
        "--node-ip-address", "127.0.0.1", f"--temp-dir={temp}",
    ]  # fmt: skip
    started = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180, check=False)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(ray), "stop", "--force"], capture_output=True, env=env, timeout=120, check=False)
        shutil.rmtree(temp, ignore_errors=True)
