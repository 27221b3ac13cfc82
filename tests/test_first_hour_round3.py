"""The first hour, round 3 (issue 30), through the real CLI in subprocesses: the pager shows
colours (a real `less` on a pseudo-terminal), tables at 80-120 columns and in pipes, a mistyped
or empty `--db` on the commands that evaluate, `register` that commits before it prints, and
the messages (a read-only store, the CUDA-only seed, an evolution that failed, `--version`,
the README's paths)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import HARNESS_SCRIPT, on_a_terminal

from harness.config import CANDIDATES_DIR, PROJECT_ROOT

REFERENCE = CANDIDATES_DIR / "conv2d_v2_reference.py"


def harness(
    *args: object, db: str | None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {})}
    if db is not None:
        environment["HARNESS_DB"] = db
    return subprocess.run(
        [str(HARNESS_SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
        check=False,
    )


def candidate(number: int) -> bytes:
    return (
        f'"""Candidate {number}: torch\'s conv2d."""\n'
        "import torch.nn.functional as F\n\n\n"
        "def custom_kernel(data):\n"
        "    input_tensor, kernel, output = data\n"
        f"    output.copy_(F.conv2d(input_tensor, kernel, stride=1, padding=0))  # {number}\n"
        "    return output\n"
    ).encode()


def registered_ids(db: str) -> list[int]:
    done = harness("list", "--format", "json", db=db)
    assert done.returncode == 0, done.stderr
    import json

    return [row["submission_id"] for row in json.loads(done.stdout)]


@pytest.fixture(scope="module")
def lineage_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with five revisions of one lineage (no results): a history of a few screens."""
    folder = tmp_path_factory.mktemp("round3")
    db = f"sqlite:///{folder / 'store.sqlite'}"
    for number in range(1, 6):
        path = folder / "first_try.py"
        path.write_bytes(candidate(number))
        done = harness("register", path, "-m", f"step {number}", db=db)
        assert done.returncode == 0, done.stderr
    return db


# --- 1. the pager -------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("less") is None, reason="no less on this machine")
def test_history_through_less_shows_colours_not_their_codes(lineage_store):
    """PAGER and LESS unset: `less` with LESS=FRX (as git): the colour codes reach the terminal
    as colours, never as the `ESC[32m` text that plain `less` shows."""
    shown = on_a_terminal(["history"], {"HARNESS_DB": lineage_store}, rows=10, keys=b"q").output
    assert "first_try r1" in shown
    assert "\x1b[32m" in shown or "\x1b[1m" in shown  # the diff's colours, passed through
    assert "ESC[" not in shown
    direct = on_a_terminal(["history"], {"HARNESS_DB": lineage_store, "PAGER": ""}, rows=10).output
    assert "ESC[" not in direct and "first_try r5" in direct  # an empty PAGER: no pager


def test_the_pager_gets_less_options_only_when_less_has_none(lineage_store, tmp_path):
    record = tmp_path / "seen"
    pager = f'echo "LESS=$LESS" > {record}; cat > /dev/null'
    on_a_terminal(["history"], {"HARNESS_DB": lineage_store, "PAGER": pager}, rows=10)
    assert record.read_text() == "LESS=FRX\n"
    on_a_terminal(["history"], {"HARNESS_DB": lineage_store, "PAGER": pager, "LESS": "-i"}, rows=10)
    assert record.read_text() == "LESS=-i\n"


# --- 2. tables and progress bars at 80-120 columns -----------------------------------------------


def last_frames(screen: str) -> list[str]:
    """The progress display's last frame of each phase: the lines a terminal shows last, after
    rich's cursor moves and line erasures, that start with a phase name."""
    text = re.sub(r"\x1b\[\??[0-9;]*[A-Za-z]", "", screen.replace("\r\n", "\n"))
    lines = [line.split("\r")[-1] for line in text.split("\n")]
    found: dict[str, str] = {}
    for line in lines:
        name = line.split(" ", 1)[0]
        if name in ("test", "benchmark"):
            found[name] = line
    return list(found.values())


LONG_FAILURE = (
    b'"""Fails with a long message."""\n\n\ndef custom_kernel(data):\n'
    b'    raise RuntimeError("not written yet: " + " ".join(f"step{i}" for i in range(50)))\n'
)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A CPU tournament: the reference, a revision by an author with a long name, and one that
    fails with a long reason."""
    folder = tmp_path_factory.mktemp("round3_board")
    db = f"sqlite:///{folder / 'store.sqlite'}"
    assert harness("register", REFERENCE, "--lineage", "conv2d_v2_reference", db=db).returncode == 0
    (folder / "first_try.py").write_bytes(candidate(1))
    registered = harness("register", folder / "first_try.py", "--author", "gpumode-leaderboard", db=db)
    assert registered.returncode == 0, registered.stderr
    (folder / "long_failure.py").write_bytes(LONG_FAILURE)
    assert harness("register", folder / "long_failure.py", db=db).returncode == 0
    done = harness("tournament", "--device", "cpu", "--budget", "0.05", db=db)
    assert done.returncode == 1, done.stdout + done.stderr  # the failing one
    return {"db": db, "folder": folder}


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_list_keeps_names_whole_at_80_to_120_columns(board, columns):
    shown = harness("list", db=board["db"], env={"COLUMNS": str(columns)}).stdout
    lines = shown.splitlines()
    assert all(len(line) <= columns for line in lines), shown
    rows = [line for line in lines if re.match(r"\d+ ", line)]
    assert [row.split()[1] for row in rows] == ["conv2d_v2_reference", "first_try", "long_failure"], shown
    assert all(" conv2d_v2 " in f"{row} " for row in rows), shown  # the task, whole
    assert "…" not in shown
    if columns >= 120:
        assert "gpumode-leaderboard" in shown and "not shown" not in shown
    else:
        assert shown.endswith(f" not shown at {columns} columns: see --format json)\n")


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_the_wide_leaderboard_keeps_every_time_and_verdict_whole(board, columns):
    import json

    data = json.loads(harness("leaderboard", "--format", "json", db=board["db"]).stdout)
    shown = harness("leaderboard", "--wide", db=board["db"], env={"COLUMNS": str(columns)}).stdout
    assert all(len(line) <= columns for line in shown.splitlines()), shown
    assert "…" not in shown
    # both revisions pass; a loaded machine may flag a timing (host_clock_mismatch), which then
    # is not ranked: what is ranked must be shown whole
    ranked = [entry for entry in data["entries"] if entry["rank"] is not None]
    assert ranked, data
    assert len(re.findall(r"pass/pass", shown)) >= len(ranked)
    for entry in ranked:
        assert all(flag in shown for flag in entry["flags"]), (entry["flags"], shown)
        assert len(entry["benchmarks"]) == 4
        for timing in entry["benchmarks"]:
            mean = f"{timing['mean_ms']:#.4g}" if timing["mean_ms"] < 1000 else f"{timing['mean_ms']:.0f}"
            assert re.search(rf"(^| ){re.escape(mean)} ±[0-9.]+( |$)", shown, re.MULTILINE), (mean, shown)
    if any(entry["author"] for entry in ranked) or columns >= 120:
        assert "gpumode-leaderboard" in shown  # the author: whole where it is shown
    assert "gpumode-leaderboard" in shown or "gpumode" not in shown


def test_piped_not_ranked_reasons_wrap_at_their_words(board):
    shown = harness("leaderboard", db=board["db"]).stdout
    assert max(len(line) for line in shown.splitlines()[1:]) <= 200, shown  # the title is one line
    words = " ".join(shown.split())
    assert " ".join(f"step{i}" for i in range(50)) in words  # every word, in order, none cut


def test_the_progress_bars_fit_80_columns_and_count_what_was_dispatched(board, tmp_path):
    """A child of a timed parent: the benchmark phase times the child, the reference and the
    parent again beside it; the counter counts those, and at 80 columns the bar, the counter
    and the times are still there."""
    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    shutil.copy(board["db"].removeprefix("sqlite:///"), tmp_path / "store.sqlite")
    (tmp_path / "first_try.py").write_bytes(candidate(2))
    assert harness("register", tmp_path / "first_try.py", db=db).returncode == 0
    screen = on_a_terminal(
        ["tournament", "--device", "cpu", "--budget", "0.05"],
        {"HARNESS_DB": db},
        columns=80,
        stderr_too=True,
        code=1,  # the failing revision of the board
    ).output
    frames = last_frames(screen)
    assert [frame.split(" ", 1)[0] for frame in frames] == ["test", "benchmark"], screen[-3000:]
    for frame in frames:
        assert len(frame) <= 80 and "━" in frame and " left " in frame, frame
        done, total = map(int, re.search(r" (\d+)/(\d+) ", frame).groups())
        assert done == total, frame
    assert " 12/12 " in frames[1]  # child, reference, parent: 3 x 4 smoke shapes
    assert " 16/16 " in frames[0]  # the test phase: the three with a result count as taken from the store


# --- 3. a mistyped or empty --db ---------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["test", "1", "--device", "cpu"],
        ["bench", "1", "--device", "cpu"],
        ["tournament", "--device", "cpu"],
        ["evolve", "--from", "1", "--generations", "1", "--proposer", "builtin:mutate", "--device", "cpu"],
    ],
)
def test_a_mistyped_store_on_a_command_that_evaluates_creates_nothing(command, tmp_path):
    typo = tmp_path / "harnes.sqlite"
    done = harness(*command, "--db", f"sqlite:///{typo}", db=None)
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr
        == f"error: no store at {typo}: check --db/HARNESS_DB, or create one with `harness init`\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["list"], ["register", str(REFERENCE)], ["test", "1"], ["init"]])
def test_an_empty_store_url_is_refused_not_read_as_the_default(command, tmp_path):
    done = harness(*command, "--db", "", db=None, env={"XDG_DATA_HOME": str(tmp_path)})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: the store URL is empty: give --db a URL such as sqlite:///PATH\n"
    assert list(tmp_path.iterdir()) == []


# --- 5. register commits before it prints ------------------------------------------------------


def test_register_commits_before_it_prints_so_a_reader_that_leaves_loses_nothing(tmp_path):
    """Each registration's reader closes the pipe before a word is printed (as `| head -1` may);
    unbuffered output makes the print fail at once. Every registration is kept, each id once."""
    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert harness("init", db=db).returncode == 0
    for number in range(6):
        path = tmp_path / f"try_{number}.py"
        path.write_bytes(candidate(number))
        process = subprocess.Popen(
            [str(HARNESS_SCRIPT), "register", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "HARNESS_DB": db, "PYTHONUNBUFFERED": "1"},
        )
        process.stdout.close()
        error = process.stderr.read().decode()
        process.wait(timeout=120)
        assert "Traceback" not in error and "Error" not in error, error
    ids = registered_ids(db)
    assert len(ids) == 6 and len(set(ids)) == 6
    after = harness("register", tmp_path / "try_0.py", db=db)
    assert after.stdout.startswith("unchanged: these bytes are already submission ")
    fresh = tmp_path / "another.py"
    fresh.write_bytes(candidate(99))
    new = harness("register", fresh, db=db)
    new_id = int(re.search(r"submission (\d+)", new.stdout).group(1))
    assert new_id not in ids and sorted(registered_ids(db)) == sorted([*ids, new_id])


# --- 9. messages --------------------------------------------------------------------------------


def test_version_is_an_option_and_a_command():
    from harness import __version__

    for args in (["--version"], ["version"]):
        done = harness(*args, db=None)
        assert (done.returncode, done.stdout, done.stderr) == (0, f"harness {__version__}\n", "")


def test_the_readme_names_paths_that_exist_and_the_suite_s_real_duration():
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    for path in re.findall(r"`((?:harness|candidates|tests|prompts|benchmarks|docs)/[\w./-]+)`", readme):
        if not path.startswith("harness/_data"):  # the wheel's copy of the data (setup.py)
            assert (PROJECT_ROOT / path).exists(), path
    assert "14 minutes" not in readme


def test_writers_on_a_read_only_store_are_told_it_is_read_only(lineage_store, tmp_path):
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"no user and mount namespaces here: {probe.stderr.decode().strip()}")
    folder = tmp_path / "readonly"
    folder.mkdir()
    store = folder / "store.sqlite"
    shutil.copy(Path(lineage_store.removeprefix("sqlite:///")), store)
    before = store.read_bytes()
    (tmp_path / "new.py").write_bytes(candidate(42))
    commands = {
        "register": f"register {tmp_path / 'new.py'}",
        "test": "test 1 --device cpu",
        "seed": "seed",
        "list": "list --format json",
    }
    script = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}" + "".join(
        f" ; {HARNESS_SCRIPT} {args} --db sqlite:///{store} >/dev/null 2>{tmp_path / name}.err;"
        f" echo $? > {tmp_path / name}.rc"
        for name, args in commands.items()
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    message = (
        f"error: store {store} is read-only here (the file or its folder cannot be written): "
        "this command writes to it; list, show, leaderboard and history can read it\n"
    )
    for name in ("register", "test", "seed"):
        assert (tmp_path / f"{name}.rc").read_text() == "2\n", name
        assert (tmp_path / f"{name}.err").read_text() == message, name
    assert (tmp_path / "list.rc").read_text() == "0\n", (tmp_path / "list.err").read_text()
    assert store.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["store.sqlite"]


def test_the_cuda_only_seed_says_what_it_needs_in_the_harness_s_words(tmp_path):
    import json

    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    registered = harness("register", CANDIDATES_DIR / "conv2d_cudnn_wrap.py", db=db)
    submission = int(re.search(r"submission (\d+)", registered.stdout).group(1))
    done = harness("test", submission, "--device", "cpu", "--format", "json", db=db)
    assert done.returncode == 0, done.stderr  # unsupported on this device is no failure
    (result,) = json.loads(done.stdout)
    if result["status"] == "pass":
        pytest.skip("a CUDA toolkit and GPU are here: the extension builds and runs")
    assert result["status"] == "unsupported"
    assert result["reason"] == "needs a CUDA toolkit (CUDA_HOME unset) to build its extension (OSError)"
    assert "Please set" not in harness("show", submission, db=db).stdout


def test_an_evolution_whose_every_generation_failed_or_that_stopped_exits_1(tmp_path):
    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert harness("register", REFERENCE, "--lineage", "conv2d_v2_reference", db=db).returncode == 0
    done = harness(
        "evolve", "--from", "1", "--generations", "1", "--proposer", "false", "--device", "cpu",
        "--budget", "0.05", db=db,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    # failed: the proposer failed; stopped: a loaded machine flagged the parent's timing, so no
    # parent was left to try. Neither is a success.
    last = done.stdout.splitlines()[-1]
    assert re.fullmatch(r"experiment 1: (failed|stopped); `harness experiments show 1` tells the story", last)
    assert "proposer_failed" in done.stdout or "no parent left to try" in done.stdout
