"""A run records the time limits it ran under, and a timeout under a shorter limit than today's is
evaluated again instead of being reused as final (issue 20, item 9). Through the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SLOW = b'''"""Correct, but each call takes 1.5 s."""
import time

import torch.nn.functional as F


def custom_kernel(data):
    input_tensor, kernel, output = data
    time.sleep(1.5)
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
'''


def harness(*args: object, db: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_DB": db, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "harness", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def test_a_timeout_under_a_shorter_call_limit_is_not_final(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    candidate = tmp_path / "slow.py"
    candidate.write_bytes(SLOW)
    registered = harness("register", candidate, db=db)
    assert registered.returncode == 0, registered.stderr
    revision = int(re.search(r"submission (\d+)", registered.stdout).group(1))

    short = harness("test", revision, "--device", "cpu", "--call-timeout", "0.5", db=db)
    assert short.returncode == 1, short.stderr
    assert "timeout" in short.stdout and "(stored)" not in short.stdout, short.stdout
    again = harness("test", revision, "--device", "cpu", "--call-timeout", "0.5", db=db)
    assert again.returncode == 1 and "timeout (stored)" in again.stdout, again.stdout  # the same limit: final

    longer = harness("test", revision, "--device", "cpu", db=db)  # the default call limit, 120 s
    assert longer.returncode == 0, longer.stdout + longer.stderr
    assert "pass" in longer.stdout and "(stored)" not in longer.stdout, longer.stdout
    shorter = harness("test", revision, "--device", "cpu", "--call-timeout", "0.5", db=db)
    assert shorter.returncode == 0 and "pass (stored)" in shorter.stdout, shorter.stdout  # a pass is final

    shown = harness("show", revision, "--format", "json", db=db)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["results"][0]["status"] == "pass"
