"""Issue 33, items 5, 6, 8 and 9, on the CPU: kernel-enforced isolation and limits. Each hostile
candidate in tests/adversarial/ goes through the real sandbox (`harness test` on a SQLite store in
a tmp dir where it can) beside an honest revision; the attack fails and the honest revision
passes. A test is skipped, saying why, only where this machine lacks the mechanism (an IPC
namespace, a cgroup controller, a mount namespace)."""

from __future__ import annotations

import ctypes
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest import none_left_named, processes_named

from harness.sandbox.cgroups import make_child_cgroups
from harness.sandbox.isolation import detect_isolation
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.supervisor import ChildProcess
from harness.tasks import load_task

ADVERSARIAL = Path(__file__).parent / "adversarial"
REFERENCE = Path(__file__).resolve().parent.parent / "candidates" / "conv2d_v2_reference.py"
TASK = load_task("conv2d_v2")
LEVEL = detect_isolation()
MIB = 1024**2


def _cgroup_mechanisms() -> dict[str, int]:
    groups = make_child_cgroups(memory_bytes=256 * MIB, max_tasks=64)
    mechanisms = dict(groups.mechanisms)
    groups.remove()
    return mechanisms


CGROUPS = _cgroup_mechanisms()


def _register(
    run_cli, path: Path, lineage: str, tmp_path: Path | None = None, suffix: str = "", env: dict | None = None
) -> int:
    if suffix:  # the same code with another comment: another revision, another child
        copy = tmp_path / f"{lineage}.py"
        copy.write_bytes(path.read_bytes() + f"\n# {suffix}\n".encode())
        path = copy
    done = run_cli("register", path, "--lineage", lineage, env=env)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("submission ", 1)[1].split(":", 1)[0])


def _statuses(store_url: str) -> dict[int, tuple[str, str]]:
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as connection:
        rows = connection.execute("SELECT revision_id, status, reason || ' ' || details FROM runs").fetchall()
    return {revision: (status, details or "") for revision, status, details in rows}


# --- item 9: IPC namespace, memory and tasks in cgroups --------------------------------------

HOST_KEY = 0x48415354  # tests/adversarial/keeps_sysv_segment.py reaches for it
OWN_KEY = 0x48415253  # and leaves its own segment under this one


def _sysv_keys(kind: str) -> set[int]:
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines}


@pytest.mark.skipif("ipc" not in LEVEL.name, reason=f"no IPC namespace at isolation level {LEVEL.name}")
def test_a_sysv_segment_stays_in_its_sandbox_and_the_hosts_are_out_of_reach(run_cli, store_url, tmp_path):
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(HOST_KEY, 4096, 0o1000 | 0o600)
    queue = libc.msgget(HOST_KEY, 0o1000 | 0o600)
    assert segment >= 0 and queue >= 0, os.strerror(ctypes.get_errno())
    try:
        ids = [
            _register(run_cli, ADVERSARIAL / "keeps_sysv_segment.py", "sysv-a", tmp_path, "a"),
            _register(run_cli, ADVERSARIAL / "keeps_sysv_segment.py", "sysv-b", tmp_path, "b"),
            _register(run_cli, REFERENCE, "reference"),
        ]
        done = run_cli("test", *ids, "--device", "cpu", timeout=900)
        statuses = _statuses(store_url)
        # each would fail its call had it reached the host's segment or queue, or the other's
        assert [statuses[i][0] for i in ids] == ["pass"] * 3, done.stdout
        assert done.returncode == 0, done.stderr
        assert OWN_KEY not in _sysv_keys("shm")  # gone with its sandbox
    finally:
        libc.shmctl(segment, 0, None)  # IPC_RMID
        libc.msgctl(queue, 0, None)


@pytest.mark.skipif("memory" not in CGROUPS, reason="no memory cgroup can be made here (the watch applies)")
def test_memory_in_a_memfd_or_sysv_segments_counts_against_the_limit(run_cli, store_url):
    ids = [
        _register(run_cli, ADVERSARIAL / "fills_memfd.py", "memfd"),
        _register(run_cli, ADVERSARIAL / "fills_sysv_segment.py", "sysv"),
        _register(run_cli, REFERENCE, "reference"),
    ]
    env = {"HARNESS_MEMORY_BYTES": str(1536 * MIB)}
    done = run_cli("test", *ids, "--device", "cpu", env=env, timeout=900)
    assert done.returncode == 1, done.stderr
    assert f"memory v{CGROUPS['memory']}" in done.stdout  # the sandbox line says which applied
    statuses = _statuses(store_url)
    for revision in ids[:2]:
        status, details = statuses[revision]
        assert status == "crashed", done.stdout
        assert "killed by the kernel" in details and "over the limit of 1536 MiB (memory_bytes)" in details
    assert statuses[ids[2]][0] == "pass", done.stdout


@pytest.mark.skipif(
    "pids" not in CGROUPS, reason="no pids cgroup can be made here (the watch counts processes)"
)
def test_threads_count_against_the_tasks_limit(run_cli, store_url):
    ids = [
        _register(run_cli, ADVERSARIAL / "starts_threads.py", "threads"),
        _register(run_cli, REFERENCE, "ref"),
    ]
    done = run_cli("test", *ids, "--device", "cpu", env={"HARNESS_MAX_TASKS": "256"}, timeout=900)
    statuses = _statuses(store_url)
    assert statuses[ids[0]][0] == "runtime_error", done.stdout
    assert "can't start new thread" in statuses[ids[0]][1]
    assert statuses[ids[1]][0] == "pass", done.stdout


# --- item 5: CPU weight, the freezer, the end of every process -------------------------------


@pytest.mark.parametrize(
    "isolation",
    [
        "auto",
        pytest.param(
            "none",
            marks=pytest.mark.skipif(
                not CGROUPS, reason="without a pid namespace only a cgroup holds them all"
            ),
        ),
    ],
)
def test_spinners_in_sessions_of_their_own_do_not_starve_a_neighbour_and_all_end(
    run_cli, store_url, isolation
):
    """With isolation none, no pid namespace ends them: the child's cgroup does."""
    ids = [
        _register(run_cli, ADVERSARIAL / "spins_in_sessions.py", "spins"),
        _register(run_cli, REFERENCE, "ref"),
    ]
    env = {"HARNESS_CHECK_PARALLELISM": "2", "HARNESS_SANDBOX_ISOLATION": isolation}
    before = set(processes_named("session-spinner"))  # a suite beside this one may have its own
    done = run_cli("test", *ids, "--device", "cpu", env=env, timeout=900)
    statuses = _statuses(store_url)
    assert statuses[ids[1]][0] == "pass", done.stdout  # checked beside the spinners
    assert none_left_named("session-spinner", before)


def _cpu_ticks(pids: list[int]) -> int:
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


def _spinners_of(child: ChildProcess) -> list[int]:
    """This child's spinners only: a suite running beside this one has spinners of its own. They
    left the child's session, so its cgroup (or else its pid namespace) says whose they are."""
    named = processes_named("session-spinner")
    if child.cgroups.mechanisms:
        return sorted(set(named) & child.cgroups.pids())
    if LEVEL.full:  # a pid namespace of its own: the spinners share it with nobody else
        own = os.readlink("/proc/self/ns/pid")
        theirs = []
        for pid in named:
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") != own:
                    theirs.append(pid)
            except OSError:
                continue
        return theirs
    return named


def test_a_stopped_child_runs_nothing_until_resumed_and_leaves_nothing_behind():
    limits = SandboxLimits.from_settings(import_timeout_s=120.0)
    code = (ADVERSARIAL / "spins_in_sessions.py").read_bytes()
    child = ChildProcess(code, TASK, device="cpu", limits=limits, code_sha256="spins-test")
    try:
        assert child.start().type == "ready"
        deadline = time.monotonic() + 30
        while len(spinners := _spinners_of(child)) < 8 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(spinners) == 8
        child.stop()
        if "freezer" in CGROUPS:
            assert child.cgroups.frozen and set(spinners) <= child.cgroups.frozen_pids()
        time.sleep(0.3)
        before = _cpu_ticks(spinners)
        time.sleep(1.0)
        assert _cpu_ticks(spinners) == before  # not one tick while stopped
        child.resume()
        time.sleep(1.0)
        assert _cpu_ticks(spinners) > before
    finally:
        child.close()
    deadline = time.monotonic() + 10
    while set(spinners) & set(processes_named("session-spinner")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(spinners) & set(processes_named("session-spinner"))


# --- item 8: a private /dev -------------------------------------------------------------------


@pytest.mark.skipif(not LEVEL.full, reason=f"no mount namespace at isolation level {LEVEL.name}")
def test_the_candidate_sees_no_terminal_console_or_host_device(run_cli, store_url):
    ids = [
        _register(run_cli, ADVERSARIAL / "opens_terminals.py", "terminals"),
        _register(run_cli, REFERENCE, "ref"),
    ]
    done = run_cli("test", *ids, "--device", "cpu", timeout=900)
    statuses = _statuses(store_url)
    # the candidate fails its call naming every terminal it could open for writing and every
    # /dev entry beyond null, zero, full, random, urandom, shm, pts, mqueue and the fd links
    assert statuses[ids[0]][0] == "pass", statuses[ids[0]][1]
    assert statuses[ids[1]][0] == "pass", done.stdout
    assert "private /dev" in done.stdout


# --- item 6: the store hidden whatever the layout ---------------------------------------------


@pytest.fixture
def project_folder():
    """A folder outside the temporary root (which the sandbox hides anyway), as ~/projects would
    be: it holds the store and, below it, a folder the harness imports from."""
    root = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path.home()
    folder = Path(tempfile.mkdtemp(prefix="harness-project-", dir=root))
    (folder / "site").mkdir()
    (folder / "site" / "beside_the_store.py").write_text("")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.skipif(not LEVEL.full, reason=f"no mount namespace at isolation level {LEVEL.name}")
def test_a_store_in_a_folder_above_what_the_child_imports_is_hidden(run_cli, project_folder):
    url = f"sqlite:///{project_folder / 'store.sqlite'}"
    pythonpath = os.pathsep.join([str(project_folder / "site"), os.environ.get("PYTHONPATH", "")])
    env = {"HARNESS_DB": url, "PYTHONPATH": pythonpath}
    ids = [
        _register(run_cli, ADVERSARIAL / "reads_store_beside_checkout.py", "reader", env=env),
        _register(run_cli, REFERENCE, "ref", env=env),
    ]
    (project_folder / "notes.sqlite-wal").write_bytes(b"another store's log")
    done = run_cli("test", *ids, "--device", "cpu", env=env, timeout=900)
    statuses = _statuses(url)
    assert statuses[ids[0]][0] == "pass", statuses[ids[0]][1]  # it read no store file
    assert statuses[ids[1]][0] == "pass", done.stdout
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not LEVEL.full, reason=f"no mount namespace at isolation level {LEVEL.name}")
def test_a_cache_inside_the_store_folder_under_a_folder_shown_again_leaves_nothing_writable(
    run_cli, tmp_path
):
    """A folder on sys.path under the temporary root (shown again, read-only), the store's folder
    inside it (hidden again) and the cache folder inside that: hiding the cache a second time
    failed (it was already out of sight), and that failure skipped the read-only remount, so the
    candidate could write to the harness's own package and its virtualenv (2026-12-07)."""
    site = tmp_path / "site"
    (site / "db").mkdir(parents=True)
    url = f"sqlite:///{site / 'db' / 'store.sqlite'}"
    pythonpath = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    env = {"HARNESS_DB": url, "PYTHONPATH": pythonpath, "HARNESS_CACHE_DIR": str(site / "db" / "cache")}
    ids = [
        _register(run_cli, ADVERSARIAL / "writes_outside.py", "writer", env=env),
        _register(run_cli, REFERENCE, "ref", env=env),
    ]
    done = run_cli("test", *ids, "--device", "cpu", env=env, timeout=900)
    statuses = _statuses(url)
    assert statuses[ids[0]][0] == "pass", statuses[ids[0]][1]  # every write it tried failed
    assert statuses[ids[1]][0] == "pass", done.stdout
    assert "read-only file systems" in done.stdout and "could not" not in done.stdout, done.stdout
    assert done.returncode == 0, done.stderr


def test_a_store_in_a_folder_the_child_must_see_is_refused_with_one_line(run_cli, project_folder):
    if not LEVEL.full:
        pytest.skip(f"no mount namespace at isolation level {LEVEL.name}: nothing is hidden")
    url = f"sqlite:///{project_folder / 'store.sqlite'}"
    pythonpath = os.pathsep.join([str(project_folder), os.environ.get("PYTHONPATH", "")])
    env = {"HARNESS_DB": url, "PYTHONPATH": pythonpath}
    done = run_cli("register", REFERENCE, "--lineage", "ref", env=env)
    assert done.returncode == 0, done.stderr
    done = run_cli("test", "1", "--device", "cpu", env=env, timeout=900)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be hidden" in lines[0] and str(project_folder) in lines[0]
    assert _statuses(url) == {}  # nothing recorded


def test_without_cgroups_the_sandbox_line_says_the_watch_applies(run_cli, store_url):
    revision = _register(run_cli, REFERENCE, "ref")
    done = run_cli("test", revision, "--device", "cpu", env={"HARNESS_CGROUPS": "none"}, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "no cgroups (the parent's watch)" in done.stdout
    expected = ", ".join(f"{name} v{version}" for name, version in CGROUPS.items())
    done = run_cli("test", revision, "--device", "cpu", "--force", timeout=900)
    assert (f"cgroups: {expected}" if CGROUPS else "no cgroups (the parent's watch)") in done.stdout


@pytest.mark.skipif(not CGROUPS, reason="no cgroup can be made here")
def test_the_group_of_a_killed_parent_is_emptied_and_removed_at_the_next_start():
    groups = make_child_cgroups(memory_bytes=256 * MIB, max_tasks=64)
    base = next(iter(groups.tops.values())).parent
    groups.remove()
    dead_parent = 2**22 + 1  # above pid_max's default ceiling: no such process
    stale = base / f"harness-{os.stat('/proc/self/ns/pid').st_ino}-{dead_parent}-0123456789ab"
    other_namespace = base / f"harness-1-{dead_parent}-0123456789ab"
    stale.mkdir()
    other_namespace.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (stale / "cgroup.procs").write_text(str(sleeper.pid))
        make_child_cgroups(memory_bytes=256 * MIB, max_tasks=64).remove()
        assert sleeper.wait(timeout=10) == -9 and not stale.exists()
        assert other_namespace.exists()  # another pid namespace's pid says nothing here
    finally:
        sleeper.kill()
        other_namespace.rmdir()
        if stale.exists():
            stale.rmdir()
