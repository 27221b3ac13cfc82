"""Issue 15 on the CPU, with real `harness` processes and purpose-written candidates in
tests/adversarial/: what the parent reads back from a child and prints.

- The child replaces its output file with a symbolic link to a file hidden from it, or with a FIFO
  that nobody writes: each is a `wrong_answer` that says what the child did and nothing of the
  link's target; the FIFO does not hold the parent.
- An exception message that is rich markup, HTML and markdown is printed as text by `harness
  test`, `harness bench` and every leaderboard format.
- A `--force` run stopped by Ctrl-C or killed leaves the stored result as it was; its claim is
  void at once (its process is gone), and the next run removes the directories it left.

Each command's processes and directories are gone after it (or after the next run, for a killed
one); a child spinning in a call ends when its parent is killed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import HARNESS_SCRIPT

from harness.sandbox.isolation import detect_isolation
from harness.sandbox.resources import tree_bytes
from harness.sandbox.workspace import IO_DIR_PREFIX, PROBE_DIR_PREFIX, WORKDIR_PREFIX, work_root
from harness.store.revisions import register_revision
from harness.store.session import open_store

ADVERSARIAL = Path(__file__).parent / "adversarial"
REFERENCE = Path(__file__).resolve().parent.parent / "candidates" / "conv2d_v2_reference.py"
MARKUP = "[/] [bold red]closed[/bold red] | <img src=x onerror=alert(1)> **bold**"
HIDDEN_BYTES = b"\x00\x00\x80\x3f" * 98  # 98 floats of 1.0: the size of smoke[0]'s output


def _harness(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(HARNESS_SCRIPT), *args, "--db", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HARNESS_DB": url, "COLUMNS": "300"},
    )


def _left_behind(pid: int) -> list[Path]:
    """The io, work and probe directories of the harness process `pid` that still exist."""
    temporary = Path(tempfile.gettempdir())
    roots = [
        (Path("/dev/shm"), IO_DIR_PREFIX),
        (temporary, IO_DIR_PREFIX),
        (temporary, PROBE_DIR_PREFIX),
        (work_root(), WORKDIR_PREFIX),
    ]
    return [path for root, prefix in roots if root.is_dir() for path in root.glob(f"{prefix}{pid}-*")]


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a sandboxed child, or the `unshare` that starts it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _result(url: str, revision_id: int) -> tuple[list[tuple], list[tuple]]:
    """The stored result of a revision's test run: (state, status, reason) and its shape rows."""
    connection = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        runs = connection.execute(
            "SELECT id, state, status, reason FROM runs WHERE revision_id = ? AND mode = 'test'",
            (revision_id,),
        ).fetchall()
        shapes = connection.execute(
            "SELECT * FROM shape_results WHERE run_id IN (SELECT id FROM runs WHERE revision_id = ?) ORDER BY id",
            (revision_id,),
        ).fetchall()
    finally:
        connection.close()
    return runs, shapes


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict:
    """A store with the reference and three hostile candidates, checked by one `harness test`."""
    tmp = tmp_path_factory.mktemp("io")
    url = f"sqlite:///{tmp / 'store.sqlite'}"
    hidden = tmp / "hidden" / "secret.bin"  # the parent can read it; the candidate links to it
    hidden.parent.mkdir()
    hidden.write_bytes(HIDDEN_BYTES)
    links = (ADVERSARIAL / "links_output.py").read_bytes()
    contents = {
        "reference": REFERENCE.read_bytes(),
        "links": links.replace(b'TARGET = "/etc/hostname"', f'TARGET = "{hidden}"'.encode()),
        "fifo": (ADVERSARIAL / "fifo_output.py").read_bytes(),
        "markup": (ADVERSARIAL / "markup_in_reason.py").read_bytes(),
    }
    assert contents["links"] != links
    store = open_store(url)
    try:
        with store.session() as session:
            ids = {
                name: register_revision(session, content, f"{name}.py", lineage=name).revision.id
                for name, content in contents.items()
            }
    finally:
        store.close()
    started = time.monotonic()
    process = _harness(url, "test", *map(str, ids.values()), "--device", "cpu")
    stdout, stderr = process.communicate(timeout=400)
    return {
        "url": url,
        "ids": ids,
        "hidden": hidden,
        "process": process,
        "stdout": stdout,
        "stderr": stderr,
        "seconds": time.monotonic() - started,
    }


def test_a_link_or_fifo_in_place_of_the_output_is_a_wrong_answer_that_says_only_that(checked):
    assert checked["process"].returncode == 1, checked["stderr"]  # revisions failed: exit code 1
    expected = {
        "reference": ("pass", ""),
        "links": ("wrong_answer", "the output file was replaced by a symbolic link"),
        "fifo": ("wrong_answer", "the output file was replaced by a FIFO"),
    }
    for name, (status, reason) in expected.items():
        runs, shapes = _result(checked["url"], checked["ids"][name])
        assert runs[0][1:3] == ("done", status), (name, runs)
        assert reason in runs[0][3], (name, runs)
        assert "mismatch" not in runs[0][3], "the parent compared the link's target"
        assert str(checked["hidden"]) not in repr((runs, shapes)), "nothing of the link's target"
    assert str(checked["hidden"]) not in checked["stdout"] + checked["stderr"]
    assert checked["seconds"] < 300, "the FIFO held the parent"


def test_the_check_leaves_no_process_or_directory_behind(checked):
    assert _left_behind(checked["process"].pid) == []
    assert _children(checked["process"].pid) == []


def test_markup_in_a_reason_is_printed_as_text_in_every_format(checked):
    runs, _ = _result(checked["url"], checked["ids"]["markup"])
    assert runs[0][2] == "runtime_error" and MARKUP in runs[0][3]
    assert "MarkupError" not in checked["stderr"]
    assert "[/] [bold red]closed[/bold red]" in checked["stdout"]
    bench = _harness(
        checked["url"], "bench", str(checked["ids"]["markup"]), "--device", "cpu", "--budget", "0.1"
    )
    stdout, stderr = bench.communicate(timeout=300)
    assert bench.returncode == 1 and "MarkupError" not in stderr, stderr  # it fails: exit code 1
    assert "[/] [bold red]closed[/bold red]" in stdout
    reports = {}
    for output_format in ("table", "markdown", "html"):
        process = _harness(checked["url"], "leaderboard", "--device", "cpu", "--format", output_format)
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        reports[output_format] = stdout
    assert "[/] [bold red]closed[/bold red]" in reports["table"]
    for output_format in ("markdown", "html"):
        assert (
            "<img" not in reports[output_format]
            and "&lt;img src=x onerror=alert(1)&gt;" in reports[output_format]
        )
    assert "[bold red]closed[/bold red] \\| &lt;img" in reports["markdown"], "a pipe cannot end the cell"


def _gone(pids: list[int], seconds: float = 60) -> bool:
    """Whether every process of `pids` has ended (a zombie counts) within `seconds`: a child whose
    parent was killed notices only when it next talks to the parent, after importing torch."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_a_forced_run_stopped_or_killed_keeps_the_stored_result_and_its_claim_is_void(checked):
    url, reference = checked["url"], checked["ids"]["reference"]
    before = _result(url, reference)
    assert before[0][0][1:3] == ("done", "pass") and before[1]
    stopped = []
    for signal_number in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        process = _harness(url, "test", "--force", str(reference), "--device", "cpu")
        deadline = time.monotonic() + 120
        while not (children := _children(process.pid)):  # the forced run has claimed and started its child
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal_number)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode != 0, "stopped before it ended"
        if signal_number != signal.SIGKILL:  # Ctrl-C, `timeout`, `kill`: cleaned up on the way out
            assert process.returncode == 130 and "error: interrupted" in stderr, stderr
            assert _left_behind(process.pid) == []
        assert _result(url, reference) == before, "the old result stays until a new one is complete"
        assert _gone(children)
        stopped.append(process.pid)

    final = _harness(url, "test", "--force", str(reference), "--device", "cpu")
    stdout, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr
    assert "busy" not in stdout, "a dead process's claim is void at once"
    runs, shapes = _result(url, reference)
    assert runs[0][1:3] == ("done", "pass") and len(shapes) == len(before[1])
    assert [_left_behind(pid) for pid in [*stopped, final.pid]] == [[], [], [], []]


@pytest.mark.skipif(not detect_isolation().full, reason="needs the pid namespace's init")
def test_a_child_busy_in_a_call_ends_when_its_parent_is_killed(tmp_path):
    """The init of the child's pid namespace sees the parent's end of its status pipe close and
    exits, which ends the namespace: a call that never returns does not outlive a killed run."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = open_store(url)
    try:
        with store.session() as session:
            code = (Path(__file__).parent / "bad_candidates" / "infinite_loop.py").read_bytes()
            revision_id = register_revision(session, code, "infinite_loop.py").revision.id
    finally:
        store.close()
    process = _harness(url, "test", str(revision_id), "--device", "cpu")
    deadline = time.monotonic() + 120
    while not (children := _children(process.pid)):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    time.sleep(3)  # into the call (torch imported, the candidate spinning)
    process.kill()
    process.communicate(timeout=60)
    assert _gone(children, seconds=20)


STOPPED_THEN_KILLED = """
import os, signal, sys
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.supervisor import ChildProcess
from harness.tasks import load_task
task = load_task("conv2d_v2")
code = open(sys.argv[1], "rb").read()
child = ChildProcess(code, task, device="cpu", limits=SandboxLimits.from_settings(), code_sha256="x" * 64)
child.start()
child.stop()  # as while another revision is timed
print(" ".join(map(str, child.processes())), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not detect_isolation("cpu").full, reason="needs a pid namespace")
def test_a_child_stopped_while_another_is_timed_ends_when_its_parent_is_killed(tmp_path):
    """SIGSTOP leaves the pid namespace's init running: it sees the killed parent's status pipe
    close and ends the namespace, stopped processes included (they would wait forever for a
    SIGCONT)."""
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_THEN_KILLED, str(REFERENCE)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) >= 3, done.stdout  # unshare, the init, the worker
    assert _gone(pids, seconds=20)


# --- issue 33: whatever a child did to what the parent touches is that child's result ---------
MIB = 1024**2
HOSTILE_SETTINGS = {"HARNESS_DISK_BYTES": str(64 * MIB), "HARNESS_CODE_CACHE_BYTES": str(16 * MIB)}


def _register(url: str, contents: dict[str, bytes]) -> dict[str, int]:
    store = open_store(url)
    try:
        with store.session() as session:
            return {
                name: register_revision(session, content, f"{name}.py", lineage=name).revision.id
                for name, content in contents.items()
            }
    finally:
        store.close()


def _runs(url: str, revision_id: int) -> dict[str, tuple[str, str]]:
    """The revision's finished runs: mode -> (status, reason)."""
    connection = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        rows = connection.execute(
            "SELECT mode, status, reason FROM runs WHERE revision_id = ? AND state = 'done'", (revision_id,)
        ).fetchall()
    finally:
        connection.close()
    return {mode: (status, reason) for mode, status, reason in rows}


def _variant(name: str, old: bytes, new: bytes) -> bytes:
    code = (ADVERSARIAL / name).read_bytes()
    assert old in code
    return code.replace(old, new)


def _deep_chain(top: Path, depth: int) -> None:
    """`depth` nested folders under `top`, each made relative to the one above."""
    top.mkdir()
    current = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("deep", dir_fd=current)
        below = os.open("deep", os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
        os.close(current)
        current = below
    os.close(current)


@pytest.fixture(scope="module")
def hostile_tournament(tmp_path_factory) -> dict:
    """A store with the reference and candidates that resize the memfds the parent shares with
    them, leave a 3000-level folder chain, or hide bytes past PATH_MAX (in the exchange directory,
    in a per-code cache), run through one `harness tournament` and then a second one; a
    3000-level chain left by a dead harness process waits in /dev/shm before the first."""
    tmp = tmp_path_factory.mktemp("hostile")
    url = f"sqlite:///{tmp / 'store.sqlite'}"
    cache = tmp / "cache"
    ids = _register(
        url,
        {
            "reference": REFERENCE.read_bytes(),
            "grows_inputs": (ADVERSARIAL / "grows_shared_memory.py").read_bytes(),
            "grows_output": _variant(
                "grows_shared_memory.py", b'TARGET = "harness-inputs"', b'TARGET = "harness-timed-output"'
            ),
            "deep_folders": (ADVERSARIAL / "deep_folders.py").read_bytes(),
            "hides_exchange": (ADVERSARIAL / "hides_bytes_deep.py").read_bytes(),
            "hides_cache": _variant("hides_bytes_deep.py", b'TARGET = "exchange"', b'TARGET = "cache"'),
        },
    )
    process = subprocess.Popen(["true"])  # a pid that is gone by the time the run starts
    process.wait()
    leftover = Path("/dev/shm") / f"{IO_DIR_PREFIX}{process.pid}-left"
    if Path("/dev/shm").is_dir():
        _deep_chain(leftover, 3000)
    environment = {**os.environ, "HARNESS_DB": url, "COLUMNS": "300", "HARNESS_CACHE_DIR": str(cache)}
    runs = []
    for _ in range(2):
        command = [
            str(HARNESS_SCRIPT),
            "tournament",
            "--device",
            "cpu",
            "--mode",
            "benchmark",
            "--budget",
            "0.2",
        ]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**environment, **HOSTILE_SETTINGS},
        )
        stdout, stderr = process.communicate(timeout=600)
        runs.append((process, stdout, stderr))
    return {"url": url, "ids": ids, "runs": runs, "cache": cache, "leftover": leftover}


def test_hostile_children_end_no_run_and_each_gets_a_clear_reason(hostile_tournament):
    for process, stdout, stderr in hostile_tournament["runs"]:  # the second on the same store
        assert process.returncode == 1, stderr  # some revision failed; the run itself ended
        assert "Traceback" not in stderr, stderr
        assert "leaderboard on cpu" in stdout, stdout
    url, ids = hostile_tournament["url"], hostile_tournament["ids"]
    assert {mode: status for mode, (status, _) in _runs(url, ids["reference"]).items()} == {
        "test": "pass",
        "benchmark": "pass",
    }
    expected = {
        "grows_inputs": (
            "test",
            "crashed",
            "protocol violation during call on smoke[0]: the child resized the harness's inputs memory",
        ),
        "grows_output": (  # a checked call's output goes there too
            "test",
            "crashed",
            "protocol violation during call on smoke[0]: the child resized the harness's shared output buffer",
        ),
        "hides_exchange": (
            "test",
            "crashed",
            "in the working directories, over the limit of 64 MiB (disk_bytes)",
        ),
        "hides_cache": (
            "test",
            "crashed",
            "in the per-code caches, over the limit of 16 MiB (code_cache_bytes)",
        ),
    }
    for name, (mode, status, reason) in expected.items():
        runs = _runs(url, ids[name])
        assert runs[mode][0] == status and reason in runs[mode][1], (name, runs)
    # the chain it leaves is removed after every call and with its working directory
    assert {mode: status for mode, (status, _) in _runs(url, ids["deep_folders"]).items()} == {
        "test": "pass",
        "benchmark": "pass",
    }


def test_hostile_children_leave_nothing_behind(hostile_tournament):
    for process, _stdout, _stderr in hostile_tournament["runs"]:
        assert _left_behind(process.pid) == []
        assert _children(process.pid) == []
    assert not hostile_tournament["leftover"].exists(), "a dead process's deep chain is removed"
    kept = tree_bytes([hostile_tournament["cache"]])
    assert kept < 16 * MIB, f"{kept} bytes kept in the per-code caches"


def test_a_shared_memfd_cannot_be_shrunk_or_sealed_by_whoever_holds_it():
    """What a child could do with its copy of a memfd the parent shares with it, besides growing
    it (the CLI test above): shrinking it and adding seals (F_SEAL_GROW would stop the parent's
    grow, F_SEAL_WRITE its writes) fail for every holder, so the parent's mappings keep their
    pages and its grows only meet a size it did not set."""
    import errno
    import fcntl

    from harness.sandbox.workspace import create_shared_memory

    fd = create_shared_memory("harness-inputs")
    try:
        os.ftruncate(fd, 4096)
        held = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)  # as the child reaches it
        try:
            for attempt in (
                lambda: os.ftruncate(held, 0),
                lambda: fcntl.fcntl(held, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW),
                lambda: fcntl.fcntl(held, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE),
            ):
                with pytest.raises(OSError) as failed:
                    attempt()
                assert failed.value.errno == errno.EPERM
            assert os.fstat(fd).st_size == 4096
        finally:
            os.close(held)
    finally:
        os.close(fd)
