"""`harness evolve` end to end on the CPU: the real CLI in a subprocess, a SQLite store in a tmp
dir, the sandboxed runner with the Triton interpreter on the smoke shapes, real proposers
(builtin:mutate, and tests/proposers/reply.py behind --proposer)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import rows

from harness.evolve.mutate import mutate_candidate
from harness.tasks import load_task
from harness.timing import SLOWER_MIN_RUNS

HARNESS = Path(sys.executable).parent / "harness"
REPLY_SCRIPT = Path(__file__).parent / "proposers" / "reply.py"
SEED_ID = 99237  # conv2d_a100_ultra, the autotuned Triton seed (7 configs)
TINY = b"""import torch
import torch.nn.functional as F


def custom_kernel(data):
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
"""


def harness(
    db: str, *args: object, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HARNESS), *(str(arg) for arg in args)],
        capture_output=True,
        text=True,
        env={**os.environ, "HARNESS_DB": db, **(env or {})},
        timeout=timeout,
        check=False,
    )


def steps_of(db: str, proposer: str, columns: str) -> list[tuple]:
    """`columns` of the steps of the experiments run with `proposer`, in order."""
    return rows(
        db,
        f"select {columns} from experiment_steps s join experiments e on e.id = s.experiment_id "
        "where e.proposer = ? order by e.id, s.generation",
        proposer,
    )


def evolve_one_child(
    db: str, parent_id: int, proposer: str, *, budget: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """One generation of `harness evolve` on the CPU from `parent_id` with `proposer`."""
    arguments = ["--from", parent_id, "--proposer", proposer, "--device", "cpu", "--budget", budget]
    return harness(db, "evolve", *arguments, "--generations", 1, env=env)


def reply_command(mode: str, *args: object) -> str:
    return shlex.join([sys.executable, str(REPLY_SCRIPT), mode, *(str(arg) for arg in args)])


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = f"sqlite:///{tmp_path_factory.mktemp('evolve') / 'store.sqlite'}"
    assert harness(db, "seed").returncode == 0
    return db


def test_builtin_mutate_experiment_from_a_seed(seeded_store: str):
    db = seeded_store
    before = rows(db, "select max(id) from revisions")[0][0]
    result = harness(
        db,
        "evolve",
        "--from",
        SEED_ID,
        "--generations",
        2,
        "--proposer",
        "builtin:mutate",
        "--device",
        "cpu",
        "--budget",
        0.1,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "experiment 1"
    assert "experiment 1: finished" in result.stdout

    assert rows(db, "select status, task, proposer from experiments") == [
        ("finished", "conv2d_v2", "builtin:mutate")
    ]
    steps = rows(
        db,
        "select generation, parent_id, template, status, child_id, summary, prompt from experiment_steps "
        "where experiment_id = 1 order by generation",
    )
    assert [step[0] for step in steps] == [1, 2]
    assert steps[0][1] == SEED_ID  # the only parent there is at first
    for generation, parent_id, template, status, child_id, summary, prompt in steps:
        assert (template, status) == ("improve", "pass")
        assert child_id > before
        parent_code = rows(
            db,
            "select b.content from revisions r join blobs b on b.sha256 = r.code_sha256 where r.id = ?",
            parent_id,
        )[0][0]
        child = rows(
            db,
            "select b.content, r.parent_id, r.author, r.message, r.lineage_id from revisions r "
            "join blobs b on b.sha256 = r.code_sha256 where r.id = ?",
            child_id,
        )[0]
        # the child is the mutation of its parent under the experiment's seed and the generation
        expected = mutate_candidate(parent_code, f"0:{generation}")
        assert child[0] == expected.content
        assert child[1:4] == (parent_id, "builtin:mutate", expected.summary) and summary == expected.summary
        assert parent_code.decode() in prompt and "# The revision to improve" in prompt
    # by generation 2 the parent's check result was known and went into the prompt
    first_shape = load_task("conv2d_v2").smoke[0].label()
    assert "It passes. On cpu" in steps[1][6] and f"| {first_shape} | " in steps[1][6]

    story = harness(db, "experiments", "show", "1")
    assert story.returncode == 0, story.stderr
    assert f"generation 1: improve submission {SEED_ID}, asked builtin:mutate" in story.stdout
    assert f"-> submission {steps[1][4]}: pass" in story.stdout
    assert "summary: mutate: " in story.stdout
    listing = harness(db, "experiments")
    assert listing.returncode == 0 and "builtin:mutate" in listing.stdout and "2/2" in listing.stdout

    history = harness(db, "history", "conv2d_a100_ultra", "--device", "cpu")
    assert history.returncode == 0, history.stderr
    for _, _, _, _, child_id, _, _ in steps:
        assert f"submission {child_id}\n" in history.stdout
    assert "\n+ " in history.stdout and "\n- " in history.stdout

    finished_again = harness(db, "evolve", "--resume", 1)
    assert finished_again.returncode == 2
    assert (
        finished_again.stderr
        == "error: experiment 1 has finished all its generations; start a new one to go on\n"
    )


@pytest.fixture(scope="module")
def tiny_revision(seeded_store: str, tmp_path_factory: pytest.TempPathFactory) -> int:
    path = tmp_path_factory.mktemp("tiny") / "tiny_conv.py"
    path.write_bytes(TINY)
    assert harness(seeded_store, "register", path).returncode == 0
    return rows(
        seeded_store,
        "select r.id from revisions r join lineages l on l.id = r.lineage_id where l.name = 'tiny_conv'",
    )[0][0]


def test_an_interrupted_experiment_resumes(
    seeded_store: str, tiny_revision: int, tmp_path: Path, process_gone
):
    db, state = seeded_store, tmp_path
    command = reply_command("second-call-hangs", state)
    process = subprocess.Popen(
        [
            str(HARNESS),
            "evolve",
            "--from",
            str(tiny_revision),
            "--generations",
            "2",
            "--proposer",
            command,
            "--device",
            "cpu",
            "--budget",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HARNESS_DB": db},
    )
    deadline = time.monotonic() + 120
    while not (state / "hanging").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the proposer was never called a second time"
        time.sleep(0.2)
    hanging_pid = int((state / "hanging").read_text())
    process.send_signal(signal.SIGINT)  # Ctrl-C while the proposer of generation 2 hangs
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert process_gone(hanging_pid), "the interrupted proposer was left running"
    ((experiment_id, status, reason),) = rows(
        db, "select id, status, reason from experiments where proposer = ?", command
    )
    assert stderr.endswith(f"error: interrupted; `harness evolve --resume {experiment_id}` continues it\n")
    assert status == "interrupted" and "--resume" in reason
    assert rows(
        db,
        "select generation, status from experiment_steps where experiment_id = ? order by generation",
        experiment_id,
    ) == [(1, "pass"), (2, "proposing")]  # generation 2's proposer is asked again on resume

    resumed = harness(db, "evolve", "--resume", experiment_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "generation 1/2" not in resumed.stdout and "generation 2/2" in resumed.stdout
    steps = rows(
        db,
        "select generation, status, child_id, tokens, cost, summary from experiment_steps "
        "where experiment_id = ? order by generation",
        experiment_id,
    )
    assert [(generation, status) for generation, status, *_ in steps] == [(1, "pass"), (2, "pass")]
    summaries = [summary for *_, summary in steps]
    assert summaries[0] == "call 1: mark 'import torch'"
    assert summaries[1].startswith("call 3: mark 'import torch")  # the second call hung; the third answered
    assert all((tokens, cost) == (1234, 0.01) for _, _, _, tokens, cost, _ in steps)
    assert rows(db, "select status from experiments where id = ?", experiment_id) == [("finished",)]
    story = harness(db, "experiments", "show", experiment_id)
    assert "1234 tokens, cost 0.01" in story.stdout and "<<<<<<< SEARCH" in story.stdout


@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        ("garbage", "edit_failed", "neither SEARCH/REPLACE blocks nor a fenced"),
        ("no-match", "edit_failed", "SEARCH/REPLACE block 2 of 2 (reply line 7) matches the parent 0 times"),
        ("same", "unchanged", "the reply gives back the parent's exact bytes"),
        ("fail", "proposer_failed", "exited with status 3: the model is overloaded"),
    ],
)
def test_steps_without_a_child_are_recorded_with_their_reason(
    seeded_store, tiny_revision, mode, status, reason
):
    db = seeded_store
    revisions_before = rows(db, "select count(*) from revisions")
    command = reply_command(mode)
    result = harness(
        db,
        "evolve",
        "--from",
        tiny_revision,
        "--generations",
        1,
        "--proposer",
        command,
        "--device",
        "cpu",
        "--budget",
        0.1,
    )
    assert result.returncode == 1, result.stderr  # every generation failed (README, "Exit codes")
    ((step_status, step_reason, child_id, reply),) = steps_of(
        db, command, "s.status, s.reason, s.child_id, s.reply"
    )
    assert step_status == status and reason in step_reason and child_id is None
    assert rows(db, "select count(*) from revisions") == revisions_before
    # its only generation failed: the experiment failed, with the reason
    ((experiment_status, experiment_reason),) = rows(
        db, "select status, reason from experiments where proposer = ?", command
    )
    assert experiment_status == "failed" and f"1 of 1: {status}: " in experiment_reason
    assert reason in experiment_reason and "failed; `harness experiments show" in result.stdout
    if mode != "fail":
        assert reply  # what the proposer said is kept for review


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--from", 424242, "--generations", 1, "--proposer", "builtin:mutate"),
            "there is no submission 424242",
        ),
        (("--lineage", "nope", "--generations", 1, "--proposer", "builtin:mutate"), "unknown lineage 'nope'"),
        (
            ("--from", SEED_ID, "--generations", 1, "--proposer", "builtin:mutant"),
            "unknown built-in proposer",
        ),
        (
            ("--from", SEED_ID, "--generations", 0, "--proposer", "builtin:mutate"),
            "--generations must be at least 1",
        ),
        (
            ("--from", SEED_ID, "--lineage", "x", "--generations", 1, "--proposer", "builtin:mutate"),
            "exactly one of",
        ),
        (("--from", SEED_ID, "--proposer", "builtin:mutate"), "give --generations N and --proposer P"),
        (
            ("--from", SEED_ID, "--generations", 1, "--proposer", "no-such-llm-client -m x"),
            "command not found",
        ),
        (
            ("--from", SEED_ID, "--generations", 1, "--proposer", "builtin:mutate", "--device", "tpu"),
            "unknown device",
        ),
        (("--resume", 1, "--generations", 3, "--device", "cpu"), "drop --generations, --device"),
        (("--resume", 4242), "there is no experiment 4242"),
    ],
)
def test_bad_evolve_requests_write_nothing(seeded_store, args, message):
    db = seeded_store
    before = rows(db, "select count(*) from experiments"), rows(db, "select count(*) from experiment_steps")
    if "--resume" not in args and "--device" not in args:
        args = (*args, "--device", "cpu")
    result = harness(db, "evolve", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr and result.stderr.count("\n") == 1
    assert (
        rows(db, "select count(*) from experiments"),
        rows(db, "select count(*) from experiment_steps"),
    ) == before


def test_a_childs_checks_stop_at_its_first_failing_shape(seeded_store: str, tmp_path: Path):
    """A child wrong on every shape is checked until its first shape fails, the others stay
    `not_run` (issue 31: a child's checks cost what its change needs); `harness test` of the same
    file as a revision of its own checks every shape, as GPU MODE's test mode does."""
    db = seeded_store
    parent = tmp_path / "tiny_parent.py"
    parent.write_bytes(TINY)
    assert harness(db, "register", parent).returncode == 0
    ((parent_id,),) = rows(
        db, "select r.id from revisions r join lineages l on l.id = r.lineage_id where l.name = 'tiny_parent'"
    )
    command = reply_command("break")
    result = evolve_one_child(db, parent_id, command, budget=0.1)
    assert result.returncode == 0, result.stderr
    ((child_id,),) = steps_of(db, command, "s.child_id")
    statuses = rows(
        db,
        "select s.status from shape_results s join runs u on u.id = s.run_id "
        "where u.revision_id = ? and u.mode = 'test' order by s.id",
        child_id,
    )
    assert [status for (status,) in statuses][:2] == ["wrong_answer", "not_run"], statuses
    assert {status for (status,) in statuses[1:]} == {"not_run"}

    alone = tmp_path / "broken.py"
    alone.write_bytes(TINY.replace(b"(input_tensor, kernel))", b"(input_tensor, kernel) + 1)"))
    registered = harness(db, "register", alone)
    assert registered.returncode == 0, registered.stderr
    revision = registered.stdout.split()[2].rstrip(":")
    assert harness(db, "test", revision, "--device", "cpu").returncode == 1
    checked = rows(
        db,
        "select s.status from shape_results s join runs u on u.id = s.run_id where u.revision_id = ? "
        "and u.mode = 'test'",
        revision,
    )
    assert len(checked) == len(statuses) and {status for (status,) in checked} == {"wrong_answer"}


@pytest.mark.parametrize("shortcuts", [True, False], ids=["shortcuts", "without"])
def test_a_child_clearly_slower_than_its_parent_stops_timing_early(
    seeded_store: str, tmp_path: Path, shortcuts: bool
):
    """A right child 10 to 30 ms a call slower than its parent stops timing each shape after the few
    calls that show it clearly slower (harness.timing.clearly_slower), with no second pass, and
    its figures are still its calls' own (issue 31: a slower child's timing costs what its
    change needs). The parent, timed without a yardstick, times every shape in two passes; so
    does the child with HARNESS_CHILD_SHORTCUTS=0 (benchmarks/evolve_throughput.py's `full` run)."""
    db = seeded_store
    parent = tmp_path / f"tiny_slow_parent_{shortcuts}.py"
    parent.write_bytes(TINY + f"# {shortcuts}\n".encode())
    assert harness(db, "register", parent).returncode == 0
    ((parent_id,),) = rows(
        db,
        "select r.id from revisions r join lineages l on l.id = r.lineage_id where l.name = ?",
        parent.stem,
    )
    command = reply_command("slow", shortcuts)
    result = evolve_one_child(
        db, parent_id, command, budget=2, env={"HARNESS_CHILD_SHORTCUTS": str(int(shortcuts))}
    )
    assert result.returncode == 0, result.stderr
    ((child_id,),) = steps_of(db, command, "s.child_id")

    def timed_shapes(revision_id: int) -> list[tuple[int, float, dict]]:
        found = rows(
            db,
            'select s.runs, s.mean_ms, s."check" from shape_results s join runs u on u.id = s.run_id '
            "where u.revision_id = ? and u.mode = 'benchmark' and s.status = 'pass' order by s.id",
            revision_id,
        )
        return [(runs, mean, json.loads(check)) for runs, mean, check in found]

    parent_shapes, child_shapes = timed_shapes(parent_id), timed_shapes(child_id)
    assert parent_shapes and len(child_shapes) == len(parent_shapes), (parent_shapes, child_shapes)
    # a timing the parent's clock flagged (host_clock_mismatch: a loaded machine) is timed again
    # in a later pass, and a flagged parent mean is no yardstick (store.runs.passing_shape_means)
    yardsticks = 0
    for (parent_runs, parent_mean, parent_check), (runs, mean, check) in zip(parent_shapes, child_shapes):
        parent_flagged, flagged = parent_check["timing"].get("flags"), check["timing"].get("flags")
        assert parent_check["timing"].get("stopped_slower_than_ms") is None
        # two passes, and more only where the parent's clock flagged the timing
        assert len(parent_check["passes"]) == 2 or (parent_flagged and len(parent_check["passes"]) > 2)
        assert parent_runs > 10
        assert mean > 10 > 10 * parent_mean  # what its calls took: a sleep of 10-30 ms and the work
        if shortcuts and not parent_flagged:
            yardsticks += 1
            assert check["timing"]["stopped_slower_than_ms"] == pytest.approx(parent_mean)
            if not flagged:  # a flagged child's shape is timed again, in full
                assert not check["passes"] and SLOWER_MIN_RUNS <= runs < 2 * SLOWER_MIN_RUNS, (runs, check)
        else:  # about 1 s of calls a pass, 10-30 ms each
            assert check["timing"].get("stopped_slower_than_ms") is None
            assert len(check["passes"]) == 2 or (flagged and len(check["passes"]) > 2), check
            assert runs > 2 * SLOWER_MIN_RUNS, (runs, check)
    if shortcuts and not yardsticks:
        pytest.skip("every parent timing was flagged by a loaded host's clock: no yardstick to stop by")


def test_a_failing_parent_gets_the_fix_prompt_a_few_times(seeded_store: str, tmp_path: Path):
    db = seeded_store
    wrong = tmp_path / "wrong_conv.py"
    wrong.write_bytes(
        TINY.replace(b"F.conv2d(input_tensor, kernel))", b"F.conv2d(input_tensor, kernel) + 1)")
    )
    assert harness(db, "register", wrong).returncode == 0
    ((wrong_id,),) = rows(
        db, "select r.id from revisions r join lineages l on l.id = r.lineage_id where l.name = 'wrong_conv'"
    )
    command = reply_command("fix")
    args = ("--from", wrong_id, "--proposer", command, "--device", "cpu", "--budget", 0.1)
    fixed = harness(db, "evolve", *args, "--generations", 1)
    assert fixed.returncode == 0, fixed.stderr
    ((template, status, child_id, prompt),) = steps_of(
        db, command, "s.template, s.status, s.child_id, s.prompt"
    )
    assert (template, status) == ("fix", "pass")
    assert "it fails with status `wrong_answer`" in prompt and "mismatched elements" in prompt
    assert rows(
        db,
        "select b.content from revisions r join blobs b on b.sha256 = r.code_sha256 where r.id = ?",
        child_id,
    ) == [(TINY,)]

    # with no fix attempts allowed, a lineage with nothing passing has no parent left
    stuck = harness(db, "evolve", *args, "--generations", 1, "--max-fix-attempts", 0)
    assert stuck.returncode == 1, stuck.stderr  # stopped: no parent left to try
    assert "stopped" in stuck.stdout and "no parent left to try" in stuck.stdout
    assert rows(
        db, "select status from experiments where proposer = ? order by id desc limit 1", command
    ) == [("stopped",)]


def _sandboxed_descendants(pid: int) -> list[int]:
    """The processes below `pid` that run a sandboxed child (`harness.sandbox.child`, not its
    isolation probe)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
                commands[int(entry.name)] = Path(entry.path, "cmdline").read_bytes().decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue

    def below(candidate: int) -> bool:
        while candidate in parents and candidate > 1:
            candidate = parents[candidate]
            if candidate == pid:
                return True
        return False

    return [
        child
        for child, command in commands.items()
        if "harness.sandbox.child" in command and "--probe" not in command and below(child)
    ]


def test_an_experiment_interrupted_while_evaluating_resumes(seeded_store: str, tiny_revision: int):
    db = seeded_store
    command = reply_command("whole-file")
    process = subprocess.Popen(
        [str(HARNESS), "evolve", "--from", str(tiny_revision), "--generations", "1", "--proposer", command]
        + ["--device", "cpu", "--budget", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HARNESS_DB": db},
    )
    deadline = time.monotonic() + 120
    while steps_of(db, command, "s.status") in ([], [("proposing",)]):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no child was registered"
        time.sleep(0.05)
    ((status, child_id),) = steps_of(db, command, "s.status, s.child_id")
    assert status == "evaluating"
    while not rows(db, "select id from runs where revision_id = ? and state = 'claimed'", child_id):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    # The runner has claimed the child's run and is starting its sandbox (a child process whose
    # startup takes seconds); a signal that lands inside the fork itself is swallowed by Python's
    # at-fork hooks, so wait until the fork is done: the sandboxed child runs (on a loaded machine
    # a fixed second was not always enough), and a second more as before.
    deadline = time.monotonic() + 120
    while not _sandboxed_descendants(process.pid):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "no sandboxed child was started"
        time.sleep(0.05)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-5000:]
    ((experiment_id, experiment_status),) = rows(
        db, "select id, status from experiments where proposer = ?", command
    )
    assert experiment_status == "interrupted"
    assert rows(db, "select count(*) from runs where state = 'claimed'") == [(0,)]  # no claim left behind

    resumed = harness(db, "evolve", "--resume", experiment_id)
    assert resumed.returncode == 0, resumed.stderr
    assert f"evaluating submission {child_id} (registered before the interruption)" in resumed.stdout
    assert steps_of(db, command, "s.status, s.child_id") == [("pass", child_id)]
