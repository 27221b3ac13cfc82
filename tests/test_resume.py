"""Ctrl-C keeps every finished (revision, shape) of the untimed phase, and the next run resumes
from there: only the missing shapes are evaluated, and the run completes with the kept ones
(issue 20, item 5). Through the real CLI in subprocesses, on the CPU."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import HARNESS_SCRIPT, rows

from harness.config import CANDIDATES_DIR

REFERENCE = CANDIDATES_DIR / "conv2d_v2_reference.py"
SLEEP_S = 8
# A fresh child's calls, one per smoke shape (no autotuners): the second writes zeros (a wrong
# answer the evaluation goes on after), the fourth sleeps first. A resumed child whose first call
# is the last shape answers it at once: so a quick last shape says that nothing else ran before.
CANDIDATE = b'''"""Wrong on its second call; sleeps %d s before its fourth."""
import time

import torch.nn.functional as F

calls = 0


def custom_kernel(data):
    global calls
    calls += 1
    input_tensor, kernel, output = data
    if calls == 2:
        output.zero_()
        return output
    if calls == 4:
        time.sleep(%d)
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
''' % (SLEEP_S, SLEEP_S)


def environment(db: str) -> dict[str, str]:
    return {**os.environ, "HARNESS_DB": db, "HARNESS_CHECK_PARALLELISM": "2", "COLUMNS": "200"}


def harness(*args: object, db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HARNESS_SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=environment(db),
        timeout=600,
        check=False,
    )


def registered(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr
    return int(re.search(r"submission (\d+)", done.stdout).group(1))


def kept_shapes(db: str, revision: int) -> list[tuple]:
    """(state, index, status, call_s) of each shape stored for the revision's test run."""
    found = rows(
        db,
        "SELECT runs.state, shape_results.[index], shape_results.status, shape_results.call_s FROM runs "
        "JOIN shape_results ON shape_results.run_id = runs.id "
        "WHERE runs.revision_id = ? AND runs.mode = 'test' ORDER BY shape_results.[index]",
        revision,
    )
    return [tuple(row) for row in found]


def run_state(db: str, revision: int) -> str | None:
    found = rows(db, "SELECT state FROM runs WHERE revision_id = ? AND mode = 'test'", revision)
    return found[0][0] if found else None


def test_ctrl_c_keeps_finished_shapes_and_the_next_run_evaluates_only_the_missing_ones(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    (tmp_path / "resumed.py").write_bytes(CANDIDATE)
    reference = registered(harness("register", REFERENCE, "--lineage", "conv2d_v2_reference", db=db))
    resumed = registered(harness("register", tmp_path / "resumed.py", db=db))
    whole = registered(harness("register", tmp_path / "resumed.py", "--lineage", "uninterrupted", db=db))

    process = subprocess.Popen(
        [str(HARNESS_SCRIPT), "test", str(reference), str(resumed), "--device", "cpu"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(db),
    )
    deadline = time.monotonic() + 300
    while not (len(kept_shapes(db, resumed)) == 3 and run_state(db, reference) == "done"):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, kept_shapes(db, resumed)
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)  # the fourth shape sleeps
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.endswith("error: interrupted\n")

    kept = kept_shapes(db, resumed)
    assert [(state, index, status) for state, index, status, _ in kept] == [
        ("partial", 0, "pass"),
        ("partial", 1, "wrong_answer"),
        ("partial", 2, "pass"),
    ]
    assert run_state(db, reference) == "done"  # the revision that ended before is kept whole
    (details,) = rows(db, "SELECT details FROM runs WHERE revision_id = ?", resumed)[0]
    assert json.loads(details)["limits"]["call_timeout_s"] == 120.0  # the limits it ran under
    board = json.loads(harness("leaderboard", "--format", "json", db=db).stdout)
    (entry,) = [entry for entry in board["entries"] if entry["submission_id"] == resumed]
    assert entry["status"] == "not_run"  # a partial run is no result

    # Again, with a copy of the candidate in another lineage, evaluated whole beside it.
    again = harness("test", reference, resumed, whole, "--device", "cpu", db=db)
    assert again.returncode == 1, again.stderr  # the kept wrong answer stands
    assert "1 resumed from an interrupted check: 3 shapes kept, the rest checked now" in again.stdout
    after = kept_shapes(db, resumed)
    assert [state for state, *_ in after] == ["done"] * 4
    assert after[:3] == [("done", *shape[1:]) for shape in kept]  # the kept shapes, not evaluated again
    # Its last shape was the resumed child's first call (no sleep); the whole one's slept.
    assert after[3][2] == "pass" and after[3][3] < SLEEP_S
    assert kept_shapes(db, whole)[3][3] >= SLEEP_S

    reports = {
        report["submission_id"]: report
        for report in json.loads(
            harness("test", reference, resumed, whole, "--device", "cpu", "--format", "json", db=db).stdout
        )
    }
    assert all(report["stored"] for report in reports.values())
    assert reports[resumed]["resumed_shapes"] == [0, 1, 2] and reports[whole]["resumed_shapes"] == []
    assert reports[reference]["status"] == "pass"

    def verdict(report: dict) -> tuple:
        return (
            report["status"],
            report["reason"],
            [
                (shape["index"], shape["status"], shape["reason"], shape["verdicts"])
                for shape in report["shapes"]
            ],
        )

    assert verdict(reports[resumed]) == verdict(reports[whole])
    assert reports[resumed]["status"] == "wrong_answer" and reports[resumed]["reason"].startswith("smoke[1]")


def test_a_kept_partial_run_resumes_on_workers_and_force_starts_over(tmp_path: Path):
    """Partial runs made with the store's own calls, as an interrupted check leaves them: the next
    tournament on CPU workers (the request and its kept shapes cross a process boundary) evaluates
    the missing shape only; `harness test --force` drops the kept shapes and checks everything."""
    from harness.environment import probe_environment
    from harness.sandbox.evaluation import evaluate
    from harness.store.revisions import register_revision
    from harness.store.runs import claim_run, record_shape, release_claim
    from harness.store.session import open_store
    from harness.tasks import load_task

    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    code = REFERENCE.read_bytes()
    task = load_task("conv2d_v2")
    evaluation = evaluate(code, REFERENCE.name, task, device="cpu")
    assert evaluation.status == "pass" and len(evaluation.shapes) == 4
    store = open_store(db)
    try:
        revisions = []
        for lineage in ("resumed", "forced"):
            with store.session() as session:
                revision = register_revision(session, code, REFERENCE.name, lineage=lineage).revision.id
                run = claim_run(
                    session, revision, task.name, "test", probe_environment("cpu"), worker="w:1", ttl_s=60
                )
            for outcome in evaluation.shapes[:3]:
                with store.session() as session:
                    assert record_shape(session, run.id, "w:1", outcome)
            with store.session() as session:
                assert not record_shape(session, run.id, "w:2", evaluation.shapes[3])  # not its claim
                release_claim(session, run.id, "w:1")
            revisions.append(revision)
    finally:
        store.close()
    resumed, forced = revisions
    for revision in revisions:
        assert run_state(db, revision) == "partial" and len(kept_shapes(db, revision)) == 3
    before = kept_shapes(db, resumed)

    done = harness("tournament", "--mode", "test", "--only", resumed, "--device", "cpu", "--gpus", "2", db=db)
    assert done.returncode == 0, done.stderr
    assert (
        "test: 1 revisions, 1 evaluated now, 0 reused, 0 held by other workers, 1 passed; "
        "3 shapes kept from an interrupted run, not run again" in done.stdout
    ), done.stdout
    after = kept_shapes(db, resumed)
    assert after[:3] == [("done", *shape[1:]) for shape in before] and after[3][:3] == ("done", 3, "pass")
    details = json.loads(rows(db, "SELECT details FROM runs WHERE revision_id = ?", resumed)[0][0])
    assert details["resumed_shapes"] == [0, 1, 2]

    again = harness("test", forced, "--device", "cpu", "--force", "--format", "json", db=db)
    assert again.returncode == 0, again.stderr
    (report,) = json.loads(again.stdout)
    assert report["status"] == "pass" and report["resumed_shapes"] == [] and len(report["shapes"]) == 4
    assert all(shape[3] != kept[3] for shape, kept in zip(kept_shapes(db, forced), before))  # run anew
