"""Executors: one worker process per GPU (`--gpus`) and Ray tasks (`--executor ray`), run for real
on the CPU: worker processes pinned with CUDA_VISIBLE_DEVICES, and a local Ray cluster that the
tests start with two declared GPUs, so that Ray's GPU scheduling (and its pinning) is real.

Candidates that report CUDA_VISIBLE_DEVICES in their error show where each evaluation ran."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import local_ray_cluster, rows

from harness.config import CANDIDATES_DIR
from harness.errors import HarnessError
from harness.executors import EvaluationRequest, Job
from harness.executors.local import GpuWorkers
from harness.sandbox.limits import SandboxLimits

REFERENCE = CANDIDATES_DIR / "conv2d_v2_reference.py"

TORCH_CONV = b'''"""A torch conv2d (copy %d)."""
import torch
import torch.nn.functional as F

torch.backends.cudnn.allow_tf32 = False


def custom_kernel(data):
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel, stride=1, padding=0))
    return output
'''

REPORTS_ITS_GPU = b'''"""Fails on purpose, naming the GPU its worker was pinned to (copy %d)."""
import os


def custom_kernel(data):
    raise RuntimeError("pinned to CUDA_VISIBLE_DEVICES=" + repr(os.environ.get("CUDA_VISIBLE_DEVICES")))
'''

HANGS_AT_IMPORT = b'''"""Sleeps at import, so that a tournament can be interrupted mid-evaluation (copy %d)."""
import time

time.sleep(600)


def custom_kernel(data):
    return data[2]
'''


def register(run_cli, tmp_path: Path, template: bytes, copies: int, stem: str) -> list[int]:
    ids = []
    for copy in range(copies):
        path = tmp_path / f"{stem}_{copy}.py"
        path.write_bytes(template % copy)
        done = run_cli("register", path, "--lineage", f"{stem}_{copy}")
        assert done.returncode == 0, done.stderr
        ids.append(int(re.search(r"submission (\d+)", done.stdout).group(1)))
    return ids


@pytest.fixture
def mixed_store(run_cli, tmp_path) -> dict[str, list[int]]:
    """The reference, two passing torch candidates and two that report their GPU."""
    done = run_cli("register", REFERENCE, "--lineage", "conv2d_v2_reference")
    assert done.returncode == 0, done.stderr
    return {
        "passing": register(run_cli, tmp_path, TORCH_CONV, 2, "torch_conv"),
        "reporters": register(run_cli, tmp_path, REPORTS_ITS_GPU, 2, "reports_gpu"),
    }


def pinned_devices(store_url: str, revision_ids: list[int]) -> list[str]:
    reasons = rows(
        store_url,
        f"select reason from runs where mode = 'test' and revision_id in ({','.join(map(str, revision_ids))})",
    )
    return sorted(re.search(r"CUDA_VISIBLE_DEVICES=(\S+)", reason).group(1) for (reason,) in reasons)


def test_one_worker_per_gpu_shares_the_revisions_out_and_the_parent_stores_them(
    run_cli, store_url, mixed_store
):
    done = run_cli(
        "tournament",
        "--device",
        "cpu",
        "--gpus",
        "2",
        "--budget",
        "0.1",
        timeout=600,
    )
    assert done.returncode == 1, done.stderr  # the reporters fail
    assert "test: 5 revisions, 5 evaluated now" in done.stdout
    assert "benchmark: 3 revisions, 3 evaluated now" in done.stdout  # the two passing + the reference
    # Each worker got its own GPU: the two reporters (one per job, round robin) saw "0" and "1".
    assert pinned_devices(store_url, mixed_store["reporters"]) == ["'0'", "'1'"]
    statuses = dict(rows(store_url, "select revision_id, status from runs where mode = 'test'"))
    assert {statuses[i] for i in mixed_store["passing"]} == {"pass"}
    assert {statuses[i] for i in mixed_store["reporters"]} == {"runtime_error"}
    scores = rows(store_url, "select score_ms from runs where mode = 'benchmark'")
    assert len(scores) == 3 and all(score > 0 for (score,) in scores)
    assert rows(store_url, "select count(*) from runs where state != 'done'") == [(0,)]

    again = run_cli("tournament", "--device", "cpu", "--gpus", "2", "--budget", "0.1", timeout=300)
    assert again.returncode == 1, again.stderr  # the reporters fail
    assert "test: 5 revisions, 0 evaluated now, 5 reused" in again.stdout


def test_in_one_process_the_benchmark_phase_reuses_the_children_that_passed_the_checks(
    run_cli, store_url, mixed_store
):
    done = run_cli("tournament", "--device", "cpu", "--budget", "0.1", timeout=600)
    assert done.returncode == 1, done.stderr  # the reporters fail
    assert "benchmark: 3 revisions, 3 evaluated now" in done.stdout
    details = rows(store_url, "select mode, status, details from runs")
    benchmark = [json.loads(d) for mode, status, d in details if mode == "benchmark"]
    assert len(benchmark) == 3 and all(d["child_reused"] and d["startup_s"] == 0.0 for d in benchmark)
    test = [json.loads(d) for mode, status, d in details if mode == "test"]
    assert not any(d["child_reused"] for d in test) and all(d["startup_s"] > 0 for d in test)
    scores = rows(store_url, "select score_ms from runs where mode = 'benchmark'")
    assert all(score > 0 for (score,) in scores)
    # the leaderboard recheck starts fresh children
    done = run_cli("tournament", "--device", "cpu", "--budget", "0.1", "--mode", "leaderboard", timeout=600)
    assert done.returncode == 1, done.stderr  # the reporters fail
    recheck = [
        json.loads(d) for (d,) in rows(store_url, "select details from runs where mode = 'leaderboard'")
    ]
    assert len(recheck) == 3 and not any(d["child_reused"] for d in recheck)


def test_a_worker_in_another_environment_refuses_its_job_and_the_others_go_on():
    code = REFERENCE.read_bytes()
    request = EvaluationRequest.make(
        7, code, "reference.py", "conv2d_v2", device="cpu", limits=SandboxLimits.from_settings()
    )
    jobs = [Job(device="cpu", env_key="not-this-machine", requests=[request])]
    done, failed = [], []
    GpuWorkers(["0"]).run(
        jobs, lambda key, outcome: None, lambda job, ev: done.append(ev), lambda job, why: failed.append(why)
    )
    assert done == []
    assert len(failed) == 1
    assert failed[0].startswith("worker on GPU 0: worker environment differs from the tournament's")


def test_a_worker_message_that_does_not_decode_fails_its_job_loudly():
    """A broken worker (here a real process in the worker's place that answers a malformed shape
    message) fails its job with the line it sent, and is stopped; nothing is skipped."""
    from harness.executors.local import GpuWorker

    request = EvaluationRequest.make(
        7,
        REFERENCE.read_bytes(),
        "reference.py",
        "conv2d_v2",
        device="cpu",
        limits=SandboxLimits.from_settings(),
    )
    job = Job(device="cpu", env_key="any", requests=[request])
    worker = GpuWorker.__new__(GpuWorker)  # its process is the one below, not a real worker
    worker.device = "0"
    worker.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by stop)
    answers = '{"type": "ready"}\n{"type": "shape", "key": 7}\n{"type": "done", "evaluations": []}\n'
    script = f"import sys; sys.stdin.readline(); sys.stdout.write({answers!r}); sys.stdout.flush(); sys.stdin.read()"
    worker.process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    events = queue.Queue()
    kind, failed_job, reason = worker.run(job, events)
    assert (kind, failed_job) == ("failed", job)
    assert reason.startswith("worker on GPU 0 sent a message that does not decode")
    assert '"type": "shape", "key": 7' in reason
    assert events.empty()
    assert worker.process.poll() is not None


def test_ctrl_c_stops_the_gpu_workers_and_releases_every_claim(store_url, run_cli, tmp_path):
    ids = register(run_cli, tmp_path, HANGS_AT_IMPORT, 2, "hangs")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "harness"),
            "tournament",
            "--device",
            "cpu",
            "--gpus",
            "2",
            "--mode",
            "test",
        ],
        env={**os.environ, "HARNESS_DB": store_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (
        len(_workers_of(process.pid)) < 2
        or rows(store_url, "select count(*) from runs where state = 'claimed'") != [(len(ids),)]
    ):
        time.sleep(0.5)
    workers = _workers_of(process.pid)
    assert len(workers) == 2, "the two workers never started"
    assert rows(store_url, "select count(*) from runs where state = 'claimed'") == [(len(ids),)]
    time.sleep(3)  # the workers are importing the hanging candidates
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert rows(store_url, "select count(*) from runs") == [(0,)]
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def _workers_of(pid: int) -> list[int]:
    """The worker processes (`python -m harness.executors.worker`) whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(re.search(r"PPid:\s+(\d+)", status).group(1))
        if ppid == pid and b"harness.executors.worker" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--gpus", "0"], "--gpus must be at least 1"),
        (["--gpus", "two"], "--gpus takes a count or 'all'"),
        (["--gpus", "all"], "--gpus all, but torch sees no CUDA GPU here"),
        (["--ray-address", "127.0.0.1:1"], "--ray-address needs --executor ray"),
        (["--executor", "ray", "--gpus", "2"], "--gpus is for the local executor"),
        (["--executor", "ray", "--ray-address", "127.0.0.1:1"], "cannot reach a Ray cluster at 127.0.0.1:1"),
        (["--executor", "ray", "--ray-address", "nowhere"], "expected HOST:PORT"),
    ],
)
def test_bad_executor_options_fail_in_one_line_and_write_nothing(
    run_cli, store_url, dump_store, arguments, message
):
    done = run_cli("register", REFERENCE, "--lineage", "conv2d_v2_reference")
    assert done.returncode == 0, done.stderr
    before = dump_store(store_url)
    if "--gpus" in arguments and "all" in arguments and _has_cuda():
        pytest.skip("this machine has a GPU")
    failed = run_cli("tournament", "--device", "cpu", *arguments, timeout=120)
    assert failed.returncode == 2
    assert failed.stderr.count("\n") == 1 and message in failed.stderr, failed.stderr
    assert dump_store(store_url) == before


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# --- Ray --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory) -> Iterator[str]:
    """A local Ray cluster on this CPU that declares two GPUs; its address."""
    with local_ray_cluster(tmp_path_factory.mktemp("ray"), gpus=2) as address:
        yield address


def test_ray_tasks_run_the_tournament_on_declared_gpus(run_cli, store_url, mixed_store, ray_cluster):
    done = run_cli(
        "tournament",
        "--device",
        "cpu",
        "--executor",
        "ray",
        "--ray-address",
        ray_cluster,
        "--budget",
        "0.1",
        timeout=600,
    )
    assert done.returncode == 1, done.stderr  # the reporters fail
    assert "test: 5 revisions, 5 evaluated now" in done.stdout
    assert "benchmark: 3 revisions, 3 evaluated now" in done.stdout
    # Ray gave each task one of the two declared GPUs and pinned it.
    assert pinned_devices(store_url, mixed_store["reporters"]) == ["'0'", "'1'"]
    statuses = dict(rows(store_url, "select revision_id, status from runs where mode = 'test'"))
    assert {statuses[i] for i in mixed_store["passing"]} == {"pass"}
    assert rows(store_url, "select count(*) from runs where mode = 'benchmark' and score_ms > 0") == [(3,)]
    assert rows(store_url, "select count(*) from runs where state != 'done'") == [(0,)]


def test_jobs_are_shared_out_by_estimated_cost_and_keep_the_request_order():
    from harness.executors import split_jobs

    limits = SandboxLimits.from_settings()
    costs = [1.0, 25.0, 22.0, 5.0, 29.0, 7.0, 5.0, 4.0, 5.0, 5.5, 5.0]
    requests = [
        EvaluationRequest.make(key, b"", "x.py", "conv2d_v2", device="cpu", limits=limits, cost=cost)
        for key, cost in enumerate(costs)
    ]
    jobs = split_jobs("cpu", "key", requests, slots=2)
    totals = [sum(request.cost for request in job.requests) for job in jobs]
    assert max(totals) - min(totals) <= max(costs) and max(totals) <= sum(costs) / 2 + 5
    assert sorted(request.key for job in jobs for request in job.requests) == list(range(len(costs)))
    for job in jobs:
        keys = [request.key for request in job.requests]
        assert keys == sorted(keys)
    # Equal costs: round robin, as many jobs as slots, never more than requests.
    even = split_jobs("cpu", "key", [r.model_copy(update={"cost": 1.0}) for r in requests[:5]], 2)
    assert [[r.key for r in job.requests] for job in even] == [[0, 2, 4], [1, 3]]
    assert len(split_jobs("cpu", "key", requests[:1], 4)) == 1
    # A family (the children of one parent) shares one job, whatever the costs.
    family = {1: "p", 4: "p", 9: "q", 10: "q"}
    grouped = split_jobs("cpu", "key", requests, slots=3, family_of=family)
    assert len(grouped) == 3
    job_of = {request.key: index for index, job in enumerate(grouped) for request in job.requests}
    assert job_of[1] == job_of[4] and job_of[9] == job_of[10]
    assert sorted(job_of) == list(range(len(costs)))


def test_a_ray_answer_that_does_not_decode_is_an_error():
    from harness.executors.ray import _decode
    from harness.wire import JobFailed

    assert _decode('{"type": "error", "error": "no GPU"}') == JobFailed(error="no GPU")
    with pytest.raises(HarnessError, match="does not decode"):
        _decode('{"done": []}')  # the untyped form of before
