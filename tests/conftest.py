"""Fixtures shared by the test modules: a fresh SQLite store URL, the CLI in a subprocess (piped,
or on a pseudo-terminal: `on_a_terminal`), a dump of a store's rows (to check that a rejected
command wrote nothing), a timed run recorded as the runner records it (`record_timed_run`), and a
fresh PostgreSQL database (or each kind of store in turn) on the server that
HARNESS_TEST_POSTGRES_URL names.

Every test runs in a hermetic environment (`pytest_configure` below): HOME, the XDG folders and
the compile caches point into a fresh folder, and the user's HARNESS_* and RAY_* settings are
gone, for the tests and every process they start; SIGINT is not left ignored (a suite started in
the background)."""

from __future__ import annotations

import os
import pty
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from harness.environment import Environment
    from harness.wire import ShapeOutcome

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
TERMINAL_VARIABLES = ("COLUMNS", "LINES", "PAGER", "MANPAGER", "LESS")
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
def harness(run_cli, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """run_cli with the harness's caches (the stored tasks' files among them) in the test's tmp dir."""
    cache = tmp_path / "cache"

    def run(
        *args: object, env: dict[str, str] | None = None, **options: object
    ) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env={"HARNESS_CACHE_DIR": str(cache), **(env or {})}, **options)

    return run


@dataclass(frozen=True)
class TerminalRun:
    output: str  # everything the terminal got
    stderr: str  # what went to the pipe ("" with stderr_too)


def on_a_terminal(
    args: list[str],
    env: dict[str, str],
    *,
    rows: int | None = None,
    columns: int | None = None,
    keys: bytes = b"",
    stderr_too: bool = False,
    code: int | None = 0,
) -> TerminalRun:
    """Run the `harness` console script on a pseudo-terminal (its stdin and stdout; stderr too
    with `stderr_too`, else piped), with TERM=xterm and `env` over this process's environment.
    The terminal is `rows` x `columns` when either is given (24 x 80 for the other), else it has
    no size (the CLI takes 80 columns). Once the command has printed something, type `keys` (say
    `q` to leave a pager). Its exit code must be `code` (None: any)."""
    import fcntl
    import select
    import struct
    import termios
    import time

    primary, secondary = pty.openpty()
    if rows is not None or columns is not None:
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", rows or 24, columns or 80, 0, 0))
    process = subprocess.Popen(
        [str(HARNESS_SCRIPT), *args],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary if stderr_too else subprocess.PIPE,
        env={**os.environ, "TERM": "xterm", **env},
        start_new_session=True,  # the pty becomes its controlling terminal, as in a shell
    )
    os.close(secondary)
    output = b""
    deadline = time.monotonic() + 400
    typed = not keys
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.5)
        if not ready:
            if output and not typed:
                os.write(primary, keys)
                typed = True
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the command and its children closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(primary)
    stderr = "" if stderr_too else process.stderr.read().decode(errors="replace")
    returncode = process.wait(timeout=60)
    assert code is None or returncode == code, output.decode(errors="replace")[-2000:] + stderr
    return TerminalRun(output=output.decode(errors="replace"), stderr=stderr)


def processes_named(comm: str, *, zombies: bool = False) -> list[int]:
    """Processes on this machine named `comm` (the hostile candidates name every process they
    make); zombies only with `zombies` (an orphan killed outside a pid namespace stays one until
    the machine's init reaps it)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                alive = zombies or Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
                if alive and Path(entry.path, "comm").read_text().strip() == comm:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def none_left_named(
    comm: str, before: set[int] | frozenset[int] = frozenset(), wait_s: float = 30.0, *, zombies: bool = False
) -> bool:
    """No process named `comm` is left (zombies counted with `zombies`) but those in `before`. A
    leaked one stays for good; those of another suite running beside this one (the same test, the
    same candidate) come and go within seconds, so this waits until none of them is there at one
    moment."""
    deadline = time.monotonic() + wait_s
    while set(processes_named(comm, zombies=zombies)) - set(before):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def times_around(mean_ms: float, calls: int) -> list[float]:
    """Per-call times within 0.4 % of `mean_ms`, the same in every block of five calls."""
    return [mean_ms * (1 + 0.002 * ((i % 5) - 2)) for i in range(calls)]


def timed_outcome(
    index: int, shape: dict, times: list[float], *, set_name: str, **fields: Any
) -> ShapeOutcome:
    """A passing shape timed at `times` (and `fields`, say its verdicts or its blocks of calls)."""
    import statistics

    from harness.wire import ShapeOutcome

    return ShapeOutcome(
        set_name=set_name,
        index=index,
        shape=shape,
        status="pass",
        passed=True,
        times_ms=times,
        runs=len(times),
        mean_ms=statistics.fmean(times),
        err_ms=statistics.stdev(times) / len(times) ** 0.5,
        **fields,
    )


def record_timed_run(
    session: Session,
    revision_id: int,
    task: str,
    environment: Environment,
    shapes: list[dict],
    means: list[float],
    *,
    batch: str,
    set_name: str,
    calls: int = 30,
) -> None:
    """A passing benchmark run of `revision_id` in `batch`, each shape's calls timed around its
    mean in `means` and every verdict pass, claimed and recorded as the runner does (claim_run,
    record_run)."""
    from harness.scoring import score
    from harness.store.runs import claim_run, record_run
    from harness.verdicts import Verdict, Verdicts
    from harness.wire import Evaluation

    run = claim_run(session, revision_id, task, "benchmark", environment, worker="test", ttl_s=600)
    verdicts = Verdicts(gpumode=Verdict(status="pass"), accurate=Verdict(status="pass"))
    outcomes = [
        timed_outcome(index, shape, times_around(mean, calls), set_name=set_name, verdicts=verdicts)
        for index, (shape, mean) in enumerate(zip(shapes, means, strict=True))
    ]
    evaluation = Evaluation(
        status="pass",
        task=task,
        filename="candidate.py",
        code_sha256="",
        device=environment.device,
        mode="benchmark",
        shape_set=set_name,
        shapes=outcomes,
    )
    assert record_run(session, run.id, "test", evaluation, score_ms=score(means), batch=batch) is not None


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


def session_processes(session: int) -> list[int]:
    """The live (not zombie) processes of process session `session`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == session:
                found.append(int(entry.name))
    return found


def end_session(session: int, grace_s: float = 10.0) -> None:
    """SIGTERM to every process of `session`, SIGKILL to those left after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        for pid in session_processes(session):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while session_processes(session) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not session_processes(session):
            return


@contextmanager
def local_ray_cluster(temp: Path, *, gpus: int) -> Iterator[str]:
    """A local Ray head on this machine's CPUs that declares `gpus` GPUs (none is used), its files
    in `temp`; yields its address. `ray start` runs in a process session of its own, which every
    process of the cluster keeps (Ray starts them, and they their workers, without a session of
    their own), and the end stops that session alone: `ray stop --force`, as before, stopped every
    Ray cluster of the machine, a second suite's beside this one too (its node "dead or
    unavailable" in test_ray_tasks_run_the_tournament_on_declared_gpus, 2026-12-04)."""
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
    starter = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    try:
        output, _ = starter.communicate(timeout=180)
        assert starter.returncode == 0, output
        yield f"127.0.0.1:{port}"
    finally:
        if starter.poll() is None:
            starter.kill()
        end_session(starter.pid)
        shutil.rmtree(temp, ignore_errors=True)
