"""Many writers on one store, SQLite and PostgreSQL alike (`any_store_url`; the PostgreSQL cases need
HARNESS_TEST_POSTGRES_URL, which `.ci/postgres.sh` sets).

- claim_run raced by threads: exactly one winner, for a new key and for an expired claim;
  on PostgreSQL a row another transaction is claiming is skipped, not waited for; racing writers
  create the leaderboard secret once.
- a dead worker's claim (a real `harness test` killed with -9) is void at once and taken again by
  the next tournament, while a live claim is left alone and counted as held by another worker.
- two real `harness tournament` processes started at once: every revision evaluated exactly once,
  every result kept, no claim left behind; a candidate in the sandbox cannot see the store.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from conftest import HARNESS_SCRIPT
from sqlalchemy import make_url, select, text, update

from harness.environment import probe_environment
from harness.sandbox.isolation import detect_isolation
from harness.store.models import Run, utcnow
from harness.store.revisions import get_or_create_secret, register_revision
from harness.store.runs import claim_run
from harness.store.session import open_store

FULL_ISOLATION = detect_isolation("cpu").full
TASK = "conv2d_v2"
PASSES = b'''"""Passes on the CPU: torch's own conv2d."""
from task import input_t, output_t
import torch.nn.functional as F


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
'''
RAISES = b"""from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    raise ValueError("no kernel here")
"""
SUMMARY = re.compile(
    r"test: (\d+) revisions,\s+(\d+) evaluated now,\s+(\d+) reused,\s+(\d+) held by other\s+workers,\s+(\d+) passed"
)


def _probe(paths: list[str]) -> bytes:
    """A candidate that passes only when none of `paths` (the store, seen from the parent) is
    visible in its sandbox."""
    return f"""import os
from task import input_t, output_t
import torch.nn.functional as F

STORE_PATHS = {paths!r}


def custom_kernel(data: input_t) -> output_t:
    seen = [path for path in STORE_PATHS if os.path.exists(path)]
    assert not seen, f"sees the store: {{seen}}"
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
""".encode()


def _store_paths(url: str) -> list[str]:
    """What a candidate must not see of the store: the SQLite file, or the server's socket."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return [parsed.database]
    host = parsed.query.get("host") or "/var/run/postgresql"
    return [f"{host}/.s.PGSQL.{parsed.port or 5432}"] if host.startswith("/") else []


def _register(url: str, contents: list[bytes]) -> list[int]:
    store = open_store(url)
    try:
        with store.session() as session:
            return [
                register_revision(session, content, f"k{i}.py", lineage=f"lineage{i}").revision.id
                for i, content in enumerate(contents)
            ]
    finally:
        store.close()


def _runs(url: str) -> list[tuple[int, str, str, str, str | None]]:
    store = open_store(url)
    try:
        with store.session() as session:
            return [
                (run.revision_id, run.mode, run.state, run.claimed_by, run.status)
                for run in session.scalars(select(Run).order_by(Run.revision_id, Run.mode))
            ]
    finally:
        store.close()


def _harness(url: str, *args: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "HARNESS_DB": url, "COLUMNS": "300"}
    return subprocess.Popen(
        [str(HARNESS_SCRIPT), *args, "--db", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )


def _summary(stdout: str) -> dict[str, int]:
    found = SUMMARY.search(stdout)
    assert found, stdout
    keys = ("revisions", "evaluated", "reused", "busy", "passed")
    return dict(zip(keys, map(int, found.groups()), strict=True))


# --- claim_run under contention ------------------------------------------------------------


def _race(url: str, revision_id: int, workers: int) -> list[str]:
    """`workers` threads, each with its own session, claim the same key at the same moment;
    returns the names of those that got it."""
    store = open_store(url)
    environment = probe_environment("cpu")
    barrier = threading.Barrier(workers)

    def claim(name: str) -> str | None:
        barrier.wait(timeout=30)
        with store.session() as session:
            run = claim_run(session, revision_id, TASK, "test", environment, worker=name, ttl_s=600)
        return name if run is not None else None

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            names = list(pool.map(claim, [f"w{i}" for i in range(workers)]))
    finally:
        store.close()
    return [name for name in names if name is not None]


def test_racing_claims_have_exactly_one_winner(any_store_url):
    revision_id = _register(any_store_url, [RAISES])[0]
    winners = _race(any_store_url, revision_id, workers=6)  # a new key: the unique key decides
    assert len(winners) == 1, winners
    assert _runs(any_store_url) == [(revision_id, "test", "claimed", winners[0], None)]
    for _ in range(2):  # the claim has expired: one of the racers takes the row over
        store = open_store(any_store_url)
        with store.session() as session:
            session.execute(update(Run).values(claim_expires_at=utcnow() - timedelta(seconds=1)))
        store.close()
        winners = _race(any_store_url, revision_id, workers=6)
        assert len(winners) == 1, winners
        assert _runs(any_store_url) == [(revision_id, "test", "claimed", winners[0], None)]


def test_postgresql_skips_a_row_that_another_worker_is_claiming(postgres_url):
    """SELECT ... FOR UPDATE SKIP LOCKED: while one transaction holds the expired claim's row, a
    second claimer gives up at once (no lock wait: lock_timeout would raise) instead of waiting."""
    revision_id = _register(postgres_url, [RAISES])[0]
    environment = probe_environment("cpu")
    store = open_store(postgres_url)
    try:
        with store.session() as session:
            claim_run(session, revision_id, TASK, "test", environment, worker="dead", ttl_s=-1)
        with store.session() as holder:
            taken = claim_run(holder, revision_id, TASK, "test", environment, worker="first", ttl_s=600)
            assert taken is not None and taken.claimed_by == "first"
            with store.session() as other:
                other.execute(text("SET LOCAL lock_timeout = '2s'"))
                started = time.monotonic()
                assert (
                    claim_run(other, revision_id, TASK, "test", environment, worker="second", ttl_s=600)
                    is None
                )
                assert time.monotonic() - started < 1.5
        assert [row[3] for row in _runs(postgres_url)] == ["first"]
    finally:
        store.close()


def test_racing_writers_create_a_secret_once(any_store_url):
    store = open_store(any_store_url)
    barrier = threading.Barrier(6)

    def create(_: int) -> str:
        barrier.wait(timeout=30)
        with store.session() as session:
            return get_or_create_secret(session, "leaderboard_seed")

    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            values = list(pool.map(create, range(6)))
    finally:
        store.close()
    assert len(set(values)) == 1, values


# --- dead and live workers -----------------------------------------------------------------


def _wait_for_claim(url: str, revision_id: int, process: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = [row for row in _runs(url) if row[0] == revision_id and row[2] == "claimed"]
        if rows:
            return rows[0][3]
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    raise AssertionError("the worker never claimed the run")


def test_a_dead_workers_claim_expires_and_is_taken_again_but_a_live_one_is_not(any_store_url):
    dead_revision, live_revision = _register(any_store_url, [PASSES, RAISES])
    worker = _harness(any_store_url, "test", str(dead_revision), "--device", "cpu")
    holder = _wait_for_claim(any_store_url, dead_revision, worker)
    worker.send_signal(signal.SIGKILL)  # the claim stays behind, committed, with its expiry ahead
    worker.communicate(timeout=30)
    assert holder == f"{socket.gethostname()}:{worker.pid}"

    store = open_store(any_store_url)
    environment = probe_environment("cpu")
    with (
        store.session() as session
    ):  # the dead worker's claim is void at once (issue 15), not after its expiry
        claim_run(session, live_revision, TASK, "test", environment, worker="alive:1", ttl_s=3600)
    store.close()

    tournament = _harness(any_store_url, "tournament", "--mode", "test", "--device", "cpu")
    stdout, stderr = tournament.communicate(timeout=300)
    assert tournament.returncode == 0, stderr
    assert _summary(stdout) == {"revisions": 2, "evaluated": 1, "reused": 0, "busy": 1, "passed": 1}
    assert _runs(any_store_url) == [
        (dead_revision, "test", "done", f"{socket.gethostname()}:{tournament.pid}", "pass"),
        (live_revision, "test", "claimed", "alive:1", None),
    ]


# --- two tournaments at once ---------------------------------------------------------------


def test_two_tournaments_at_once_evaluate_each_revision_once(any_store_url):
    contents = [PASSES, RAISES, _probe(_store_paths(any_store_url))]
    revision_ids = _register(any_store_url, contents)
    tournaments = [
        _harness(any_store_url, "tournament", "--mode", "test", "--device", "cpu") for _ in range(2)
    ]
    outputs = [process.communicate(timeout=400) for process in tournaments]

    rows = _runs(any_store_url)
    assert [row[0] for row in rows] == revision_ids, "one run per revision"
    assert {row[2] for row in rows} == {"done"}, "no claim left behind"
    summaries = [_summary(stdout) for stdout, _ in outputs]
    for summary in summaries:
        assert summary["revisions"] == len(revision_ids)
        assert summary["evaluated"] + summary["reused"] + summary["busy"] == len(revision_ids), summary
    assert sum(summary["evaluated"] for summary in summaries) == len(revision_ids), summaries
    names = [f"{socket.gethostname()}:{process.pid}" for process in tournaments]
    for name, summary in zip(names, summaries, strict=True):
        assert sum(row[3] == name for row in rows) == summary["evaluated"], (name, rows)
    statuses = [row[4] for row in rows]
    assert statuses[:2] == ["pass", "runtime_error"]
    if FULL_ISOLATION:
        assert statuses[2] == "pass", "the candidate in the sandbox saw the store"
    # Last: a tournament that found every revision held by the other one still succeeds. Exit
    # code 1 says a revision failed (the one that raises): surely for the tournament that
    # evaluated it, and for the other one when that result was stored before its leaderboard.
    errors = [stderr.strip().splitlines()[-1:] for _, stderr in outputs]
    codes = [process.returncode for process in tournaments]
    assert set(codes) <= {0, 1} and 1 in codes, errors
