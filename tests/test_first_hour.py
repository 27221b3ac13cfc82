"""A first hour without friction (issue 20), through the real CLI in subprocesses on the CPU:
hermetic tests, tables that fit, speedups that read, exit codes, a wheel that works from any
folder, `show` with results, read-only commands that create nothing, `--gpus`, diff and history
on terminals and pipes, the HTML chart, setup.sh, and the wording."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HARNESS_SCRIPT, hermetic_environment, on_a_terminal

from harness.config import CANDIDATES_DIR, PROJECT_ROOT
from harness.report.leaderboard import format_error_ms, format_speedup

REFERENCE = CANDIDATES_DIR / "conv2d_v2_reference.py"
SHOW_HOME_CACHE_AND_RAY = (
    "import os, pathlib; from harness.config import get_settings; "
    "print(pathlib.Path.home()); print(get_settings().cache_dir); print(os.environ.get('RAY_ADDRESS'))"
)

SLOW = b'''"""torch's conv2d after a sleep: far slower than the reference (%s)."""
import time

import torch.nn.functional as F


def custom_kernel(data):
    input_tensor, kernel, output = data
    time.sleep(0.06)
    output.copy_(F.conv2d(input_tensor, kernel, stride=1, padding=0))
    return output
'''

FAILS = b'''"""Always raises."""


def custom_kernel(data):
    raise RuntimeError("this kernel is not written yet")
'''

ZEROS = b'''"""Writes zeros: a wrong answer."""


def custom_kernel(data):
    output = data[2]
    output.zero_()
    return output
'''

HANGS = b'''"""Sleeps at import, to be interrupted."""
import time

time.sleep(600)


def custom_kernel(data):
    return data[2]
'''


def harness(
    *args: object,
    db: str | None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **(env or {})}
    environment.pop("COLUMNS", None)
    if db is not None:
        environment["HARNESS_DB"] = db
    if env and "COLUMNS" in env:
        environment["COLUMNS"] = env["COLUMNS"]
    return subprocess.run(
        [str(HARNESS_SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def registered_id(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr
    return int(re.search(r"submission (\d+)", done.stdout).group(1))


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A CPU tournament over the reference, a slow candidate, its child registered with
    `--parent` from a file of another name, and a failing candidate; then a second child of the
    slow one (a sibling of the first), registered after it and run alone (`--only`)."""
    folder = tmp_path_factory.mktemp("first_hour")
    db = f"sqlite:///{folder / 'store.sqlite'}"
    (folder / "slow.py").write_bytes(SLOW % b"parent")
    (folder / "renamed_copy.py").write_bytes(SLOW % b"child")
    (folder / "fails.py").write_bytes(FAILS)
    (folder / "late_sibling.py").write_bytes(SLOW % b"late")
    ids = {
        "reference": registered_id(harness("register", REFERENCE, "--lineage", "conv2d_v2_reference", db=db))
    }
    ids["slow"] = registered_id(harness("register", folder / "slow.py", db=db))
    ids["child"] = registered_id(
        harness("register", folder / "renamed_copy.py", "--parent", ids["slow"], db=db)
    )
    ids["fails"] = registered_id(harness("register", folder / "fails.py", db=db))
    tournament = harness("tournament", "--device", "cpu", "--budget", "0.05", db=db)
    ids["late"] = registered_id(
        harness("register", folder / "late_sibling.py", "--parent", ids["slow"], db=db)
    )
    alone = harness("tournament", "--device", "cpu", "--budget", "0.05", "--only", ids["late"], db=db)
    return {"db": db, "folder": folder, "ids": ids, "tournament": tournament, "alone": alone}


# --- 1. hermetic tests --------------------------------------------------------------------------


def test_tests_and_their_subprocesses_see_no_home_ray_or_harness_settings_of_the_user():
    cleaned = hermetic_environment(
        Path(os.environ["HOME"]).parent / "check",
        {
            "HOME": "/root",
            "RAY_ADDRESS": "auto",
            "HARNESS_DB": "sqlite:///x",
            "HARNESS_TEST_POSTGRES_URL": "kept",
            "PATH": "/bin",
            "COLUMNS": "99",
        },
    )
    assert "RAY_ADDRESS" not in cleaned and "HARNESS_DB" not in cleaned and "COLUMNS" not in cleaned
    assert cleaned["HARNESS_TEST_POSTGRES_URL"] == "kept" and cleaned["PATH"] == "/bin"
    assert cleaned["HOME"] != "/root" and Path(cleaned["XDG_CACHE_HOME"]).is_relative_to(cleaned["HOME"])
    # This process (and so every subprocess) runs in such an environment: Ray's auth token and the
    # harness caches of the real home are out of reach.
    shown = subprocess.run(
        [sys.executable, "-c", SHOW_HOME_CACHE_AND_RAY],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    home = Path(shown[0])
    assert home == Path(os.environ["HOME"]) and "harness-tests-" in str(home)
    assert Path(shown[1]).is_relative_to(home) and shown[2] == "None"
    assert not (home / ".ray" / "auth_token").exists()


# --- 2, 3. tables that fit; speedups that read ------------------------------------------------------


def test_the_tournament_exits_1_when_a_revision_fails_and_says_how_many_it_counted(board):
    tournament = board["tournament"]
    assert tournament.returncode == 1, tournament.stderr
    assert (
        "test: 4 revisions, 4 evaluated now, 0 reused, 0 held by other workers, 3 passed\n"
        in tournament.stdout
    )
    alone = board["alone"]
    assert alone.returncode == 0, alone.stderr
    # The revision asked for and the task's reference, which the benchmark phase times with it.
    assert (
        "benchmark: 2 revisions, 1 evaluated now, 1 reused, 0 held by other workers, 2 passed "
        "(the task's reference included)" in alone.stdout
    )


def test_the_leaderboard_fits_80_columns_and_a_pipe_gets_plain_unpadded_text(board):
    narrow = harness("leaderboard", db=board["db"], env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    header = next(line for line in lines if line.split()[:1] == ["rank"])  # not a wrapped title's "ranked by"
    # GPU MODE's own score (issue 34) only from 100 columns: under them it cut the verdicts
    assert header.split()[:7] == ["rank", "id", "revision", "score", "ms", "speedup", "vs"], lines[:8]
    # The per-shape columns (headed `kernelsize 2` and so on) come on request.
    assert "accurate" in narrow.stdout and "kernelsize 2" not in narrow.stdout
    wide = harness("leaderboard", "--wide", db=board["db"])
    assert "kernelsize 2" in wide.stdout and "author" in wide.stdout
    shown = on_a_terminal(["leaderboard"], {"HARNESS_DB": board["db"]}).output  # 80 columns: no size
    assert "\x1b[" in shown
    plain_lines = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", shown).replace("\r", "").splitlines()
    assert max(map(len, plain_lines)) <= 80 and all(line == line.rstrip() for line in plain_lines)
    piped = harness("leaderboard", db=board["db"])
    assert "\x1b[" not in piped.stdout
    assert all(line == line.rstrip() for line in piped.stdout.splitlines())
    assert "not ranked" in piped.stdout and "this kernel is not written yet" in piped.stdout
    checked = harness(
        "test", board["ids"]["fails"], board["ids"]["reference"], db=board["db"], env={"COLUMNS": "80"}
    )
    assert max(map(len, checked.stdout.splitlines())) <= 80
    reason = next(
        line for line in checked.stdout.splitlines() if line.startswith(f"{board['ids']['fails']} fails r1: ")
    )
    assert "this kernel is not written yet" in reason + checked.stdout


def test_a_speedup_far_below_one_is_never_0_00x(board):
    slow = board["ids"]["slow"]
    data = json.loads(harness("leaderboard", "--format", "json", db=board["db"]).stdout)
    speedups = {entry["submission_id"]: entry["speedup_vs_reference"] for entry in data["entries"]}
    # 60 ms of sleep against a conv2d of tenths of a millisecond (on a loaded CPU the reference's
    # score carries the delay its quietest call still had, harness.timing: 0.69 ms in one CI run);
    # the formats of speedups under 0.01 are pinned below
    assert 0 < speedups[slow] < 0.05
    for output in (
        harness("leaderboard", db=board["db"]).stdout,
        harness("history", db=board["db"]).stdout,
        harness("prompt", "render", "improve", "--from", slow, db=board["db"]).stdout,
    ):
        assert "0.00x" not in output
        assert format_speedup(speedups[slow]) in output
    assert [format_speedup(value) for value in (0.0021, 0.00296, 0.00086, 1.5)] == [
        "0.0021x",
        "0.0030x",
        "0.00086x",
        "1.50x",
    ]


def test_every_command_that_prints_data_has_json(board):
    db, ids = board["db"], board["ids"]
    listed = json.loads(harness("list", "--format", "json", db=db).stdout)
    assert set(ids.values()) <= {row["submission_id"] for row in listed}
    shown = json.loads(harness("show", ids["slow"], "--format", "json", db=db).stdout)
    assert {result["mode"] for result in shown["results"]} == {"test", "benchmark"}
    checked = harness("test", ids["reference"], ids["fails"], "--format", "json", db=db)
    assert checked.returncode == 1
    assert [(row["submission_id"], row["status"], row["stored"]) for row in json.loads(checked.stdout)] == [
        (ids["reference"], "pass", True),
        (ids["fails"], "runtime_error", True),
    ]
    benched = harness("bench", ids["slow"], "--device", "cpu", "--format", "json", db=db)
    assert benched.returncode == 0, benched.stderr
    rows = {row["submission_id"]: row for row in json.loads(benched.stdout)}
    assert rows[ids["slow"]]["score_ms"] > 20 and rows[ids["reference"]]["speedup_vs_reference"] == 1.0
    history = json.loads(harness("history", "--format", "json", db=db).stdout)
    assert history[0]["diff"].startswith(f"submission {ids['reference']}")
    assert json.loads(harness("experiments", "--format", "json", db=db).stdout) == []


# --- 6. exit codes --------------------------------------------------------------------------------


def test_exit_codes_0_passed_1_failed_2_bad_input_130_interrupted(board, tmp_path):
    db, ids = board["db"], board["ids"]
    assert harness("test", ids["reference"], db=db).returncode == 0
    assert harness("test", ids["fails"], db=db).returncode == 1
    assert harness("bench", ids["fails"], "--device", "cpu", db=db).returncode == 1
    bad = harness("test", 424242, db=db)
    assert (bad.returncode, bad.stderr) == (2, "error: there is no submission 424242\n")
    (tmp_path / "hangs.py").write_bytes(HANGS)
    hangs = registered_id(harness("register", tmp_path / "hangs.py", db=db))
    process = subprocess.Popen(
        [str(HARNESS_SCRIPT), "test", str(hangs), "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HARNESS_DB": db},
    )
    time.sleep(8)  # the child is sleeping at import
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.endswith("error: interrupted\n")


# --- 7, 8. --parent and show -----------------------------------------------------------------------


def test_parent_keeps_its_lineage_unless_lineage_says_otherwise(board, tmp_path):
    listed = {
        row["submission_id"]: row
        for row in json.loads(harness("list", "--format", "json", db=board["db"]).stdout)
    }
    child = listed[board["ids"]["child"]]
    assert (child["lineage"], child["revision"], child["parent_id"]) == ("slow", 2, board["ids"]["slow"])
    (tmp_path / "fork.py").write_bytes(SLOW % b"fork")
    done = harness(
        "register",
        tmp_path / "fork.py",
        "--parent",
        board["ids"]["slow"],
        "--lineage",
        "forked",
        db=board["db"],
    )
    assert "forked r1 (parent " in done.stdout


def test_show_gives_status_score_and_reason_per_shape(board):
    db, ids = board["db"], board["ids"]
    failing = harness("show", ids["fails"], db=db).stdout
    assert "results:" in failing and "test on " in failing
    assert re.search(r"smoke\[0\] runtime_error: .*this kernel is not written yet", failing)
    slow = harness("show", ids["slow"], db=db).stdout
    assert re.search(r"benchmark on .*: pass, \d+\.?\d* ms", slow)
    data = json.loads(harness("show", ids["fails"], "--format", "json", db=db).stdout)
    shape = data["results"][0]["shapes"][0]
    assert shape["status"] == "runtime_error" and "not written yet" in shape["reason"]


# --- 10, 11. read-only commands and --gpus ----------------------------------------------------------


@pytest.mark.parametrize("command", [["list"], ["show", "1"], ["leaderboard"], ["history"], ["diff", "1"]])
def test_a_mistyped_store_on_a_read_only_command_creates_nothing(command, tmp_path):
    typo = tmp_path / "harnes.sqlite"
    done = harness(*command, "--db", f"sqlite:///{typo}", db=None)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr
        == f"error: no store at {typo}: check --db/HARNESS_DB, or create one with `harness init`\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_store_in_a_read_only_folder_can_be_listed(board, tmp_path):
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"no user and mount namespaces here: {probe.stderr.decode().strip()}")
    folder = tmp_path / "readonly"
    folder.mkdir()
    shutil.copy(Path(board["db"].removeprefix("sqlite:///")), folder / "store.sqlite")
    # A read-only bind mount (in a user and mount namespace of its own) refuses writes even to root.
    script = (
        f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && "
        f"exec {HARNESS_SCRIPT} list --format json --db sqlite:///{folder}/store.sqlite"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert board["ids"]["reference"] in {row["submission_id"] for row in json.loads(done.stdout)}
    assert sorted(path.name for path in folder.iterdir()) == ["store.sqlite"]


def test_more_gpus_than_seen_is_one_line_and_exit_2(tmp_path):
    store = tmp_path / "store.sqlite"
    done = harness("tournament", "--gpus", "99", db=f"sqlite:///{store}")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: --gpus 99, but ") and done.stderr.count("\n") == 1
    assert not store.exists()


# --- 12. diff and history ---------------------------------------------------------------------------


def test_history_is_bounded_and_paged_on_a_terminal(board):
    db = board["db"]
    piped = harness("history", "slow", db=db).stdout
    assert piped.endswith("\n") and piped.count("== ") == 3 and "\x1b[" not in piped
    last = harness("history", "slow", "--limit", "1", db=db).stdout
    assert last.count("== ") == 1 and f"submission {board['ids']['late']}" in last
    paged = on_a_terminal(["history"], {"HARNESS_DB": db, "LINES": "10", "PAGER": "echo PAGED; cat"}).output
    assert "PAGED" in paged and "\x1b[" in paged
    short = on_a_terminal(
        ["history", "--limit", "1"], {"HARNESS_DB": db, "LINES": "200", "PAGER": "echo PAGED; cat"}
    ).output
    assert "PAGED" not in short


# --- 13. the HTML chart --------------------------------------------------------------------------------


def test_the_chart_has_no_overlapping_labels_no_sibling_lines_and_a_legend_of_lineages_with_points(
    board, tmp_path
):
    out = tmp_path / "board.html"
    assert harness("leaderboard", "--format", "html", "--out", out, db=board["db"]).returncode == 0
    page = out.read_text()
    labels = re.findall(
        r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="(\w+)" class="point-label"[^>]*>(\d+)</text>', page
    )
    assert len(labels) == 3  # slow r1, r2, r3 (the reference is the dashed line; the failing one a mark)
    boxes = []
    for x, y, anchor, label in labels:
        width = 7.5 * len(label)
        left = float(x) - (width if anchor == "end" else 0)
        boxes.append((left, float(y) - 10, left + width, float(y) + 3))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
    assert page.count('class="edge"') == 2  # slow r1 -> its two children (r2 and r3); none between siblings
    legend = re.findall(r'class="legend-label">([^<]+)</text>', page)
    assert "fails" not in legend and "slow" in legend
    assert '<div class="scroll"><table>' in page


# --- 14. setup.sh --------------------------------------------------------------------------------------


def test_setup_sh_is_not_quiet_and_installs_only_when_the_project_changed(tmp_path):
    for name in ("setup.sh", "pyproject.toml", "setup.py"):
        shutil.copy(PROJECT_ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\nexit 0\n")  # "import torch" succeeds
    (bin_dir / "pip").write_text(f'#!/bin/sh\necho "pip $*" >> {tmp_path}/pip.log\necho pip output\n')
    for tool in ("python", "pip"):
        (bin_dir / tool).chmod(0o755)

    def setup() -> str:
        done = subprocess.run(
            ["bash", str(tmp_path / "setup.sh")], capture_output=True, text=True, check=True
        )
        return done.stdout

    first = setup()
    assert "pip output" in first  # pip's own output is shown
    calls = (tmp_path / "pip.log").read_text().splitlines()
    assert calls == ["pip install --disable-pip-version-check -e .[test,postgres,ray]"]
    assert "up to date" in setup()
    assert len((tmp_path / "pip.log").read_text().splitlines()) == 1
    with open(tmp_path / "pyproject.toml", "a") as pyproject:
        pyproject.write("\n# changed\n")
    assert "pip output" in setup()
    assert len((tmp_path / "pip.log").read_text().splitlines()) == 2


# --- 4. a wheel -----------------------------------------------------------------------------------------


def test_a_wheel_installs_into_a_fresh_venv_and_works_from_any_folder(tmp_path):
    """The wheel is built from a copy of the checkout with the venv's own setuptools (no network);
    the fresh venv takes the harness from the wheel alone and its dependencies from this venv."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "HARNESS_DB")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    source = tmp_path / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in tracked:
        if (PROJECT_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, source / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("harness-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    deps = next(Path(path) for path in sys.path if path.endswith("site-packages") and Path(path).is_dir())
    (site_packages / "deps-of-the-test-venv.pth").write_text(f"{deps}\n")
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "harness"), *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )

    init = run("init")
    assert init.returncode == 0, init.stderr
    store = tmp_path / "data" / "harness" / "harness.sqlite"
    assert f"store sqlite:///{store}" in init.stdout and store.is_file()  # the user's data folder
    assert "the default store: your data folder ($XDG_DATA_HOME/harness)" in init.stdout  # as README says
    seeded = run("seed")  # the seed manifest and candidates, shipped in the wheel
    assert seeded.returncode == 0, seeded.stderr
    assert "11 registered" in seeded.stdout
    listed = run("list")
    assert listed.returncode == 0 and "conv2d_tc_tf32x3" in listed.stdout
    assert re.search(r"^1 +conv2d_v2_reference +r1 ", listed.stdout, re.MULTILINE), listed.stdout
    prompt = run("prompt", "render", "improve", "--from", "2")  # the prompts, shipped in the wheel
    assert prompt.returncode == 0 and "# Task: conv2d_v2" in prompt.stdout, prompt.stderr
    tested = run("test", "1", "--device", "cpu")  # the task's files, shipped in the wheel
    assert tested.returncode == 0, tested.stderr
    assert re.search(r"^ *1 +conv2d_v2_reference r1 +pass +0: ", tested.stdout, re.MULTILINE), tested.stdout
    assert "(stored)" not in tested.stdout
    checked = run("tournament", "--only", "1", "--mode", "test", "--device", "cpu")
    assert checked.returncode == 0, checked.stderr
    assert "test: 1 revisions, 0 evaluated now, 1 reused" in checked.stdout
    shown = json.loads(run("show", "1", "--format", "json").stdout)
    assert [(result["mode"], result["status"]) for result in shown["results"]] == [("test", "pass")]
    board = run("leaderboard")
    assert board.returncode == 0 and "conv2d_v2_reference" in board.stdout, board.stderr
    diff = run("diff", "99237")
    assert diff.returncode == 0 and diff.stdout.startswith("submission 99237"), diff.stderr
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import harness.config as c; print(c.IN_CHECKOUT, c.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where[0] == "False" and Path(where[1]).is_relative_to(
        venv
    )  # the wheel's harness, not the checkout
    assert list(elsewhere.iterdir()) == []


# --- 16. wording ----------------------------------------------------------------------------------------


def test_numbers_and_messages_read_well(board, tmp_path):
    (tmp_path / "zeros.py").write_bytes(ZEROS)
    assert [format_error_ms(value) for value in (17.3, 340.0, 2.84, 0.05, 0.00047, 9.97)] == [
        "17",
        "340",
        "2.8",
        "0.050",
        "0.00047",
        "10",
    ]
    bad = harness("list", "--format", "yaml", db=board["db"])
    assert bad.returncode == 2 and bad.stderr == (
        "error: Invalid value for '--format': 'yaml' is not one of 'table', 'json'.\n"
    )
    unknown = harness("tournament", "--only", "424242", "--device", "cpu", db=board["db"])
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert (
        unknown.stderr == "error: no revision 424242 of task conv2d_v2 in the store\n"
    )  # no blank line above
    wrong = registered_id(harness("register", tmp_path / "zeros.py", db=board["db"]))
    checked = harness("test", wrong, "--device", "cpu", "--format", "json", db=board["db"])
    assert checked.returncode == 1
    reason = json.loads(checked.stdout)[0]["reason"]
    assert re.search(r"first at \([0-9, ]+\): output 0, reference -?[0-9]", reason), reason  # which is which


# --- 15. the README -------------------------------------------------------------------------------------


def test_the_readme_names_every_option_of_every_command():
    import click
    import typer

    from harness.cli import app

    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    rows = {
        line.split("`")[1].removeprefix("harness ").split(" ")[0]: line
        for line in readme.splitlines()
        if line.startswith("| `harness ")
    }
    missing = []

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, f"{prefix}{name} ")
                continue
            row = rows.get((prefix + name).split(" ")[0], "")
            options = [
                p
                for p in command.params
                if isinstance(p, click.Option) and p.opts[0] not in ("--db", "--help")
            ]
            missing.extend(
                f"{prefix}{name} {option.opts[0]}"
                for option in options
                if not any(opt in row for opt in option.opts)
            )

    walk(typer.main.get_command(app), "")
    assert missing == []
