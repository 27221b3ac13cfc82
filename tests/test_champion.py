"""The champion candidate (candidates/conv2d_tc_tf32x3.py) under the real Triton interpreter.

The interpreter computes dots in fp32, so these tests check indexing, packing, slot layout,
scaling and masking, not tensor-core precision (benchmarks/champion_bench.py measures that on a
GPU). Each autotune config is forced in turn. The checks run in a subprocess because
TRITON_INTERPRET must be set before triton is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "candidates"

# Runs inside the subprocess; prints one JSON object per case.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = [sys.argv[1], sys.argv[2]]
    import torch
    import torch.nn.functional as F
    import conv2d_tc_tf32x3 as cand

    SHAPES = [(2, 64, 7, 7, 3), (1, 20, 9, 11, 4)]  # B, C, H, W, K: PK=64 path; padded C, H != W

    def case(label, b, c, h, w, k, seed, **kw):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(b, c, h, w, generator=g) * 3.0
        wt = torch.randn(c, c, k, k, generator=g) * 0.5
        out = torch.full((b, c, h - k + 1, w - k + 1), float("nan"))
        if kw:
            res = cand.conv2d(x, wt, out, **kw)
        else:
            res = cand.custom_kernel((x, wt, out))
        ref = F.conv2d(x.double(), wt.double())
        # what a kernel that dropped the lo parts would return: fp16-rounded operands
        hi_only = F.conv2d(x.half().double(), wt.half().double())
        print(json.dumps(dict(
            label=label, same_tensor=res is out, nan=int(torch.isnan(out).sum()),
            err=float((out.double() - ref).abs().max()),
            hi_only_err=float((hi_only - ref).abs().max()),
            tol=1e-5 * (c * k * k) ** 0.5 * float(x.std() * wt.std()),
        )), flush=True)

    kernel = cand._conv_kernel
    for i, cfg in enumerate(cand.GPU_CONFIGS):
        kernel.configs = [cfg]
        for j, shape in enumerate(SHAPES):
            case(f"default path, config {i} {cfg}, shape {shape}", *shape, seed=10 * i + j)
    kernel.configs = [cand.GPU_CONFIGS[0]]
    for mode in (cand.T3F, cand.H3, cand.H4, cand.H4S):
        for flush in (0, 1):
            case(f"mode {mode} flush {flush} pk 32, shape {SHAPES[1]}", *SHAPES[1], seed=100 + mode,
                 mode=mode, flush=flush, group_k=64, pk=32)
    """
)


@pytest.fixture(scope="module")
def interpreter_results(tmp_path_factory):
    shim = tmp_path_factory.mktemp("task_shim")
    (shim / "task.py").write_text("input_t = output_t = tuple\n")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(shim), str(CANDIDATES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_every_config_and_mode_ran(interpreter_results):
    labels = [r["label"] for r in interpreter_results]
    assert sum(label.startswith("default path") for label in labels) == 6 * 2
    assert sum(label.startswith("mode") for label in labels) == 4 * 2


def test_output_filled_in_place(interpreter_results):
    for r in interpreter_results:
        assert r["same_tensor"], r["label"]
        assert r["nan"] == 0, r["label"]


def test_matches_float64_reference(interpreter_results):
    for r in interpreter_results:
        assert r["err"] <= r["tol"], r


def test_tolerance_would_catch_missing_lo_terms(interpreter_results):
    """The bound is tight enough to fail a kernel that kept only the rounded (hi) operands."""
    for r in interpreter_results:
        assert r["hi_only_err"] > 10 * r["tol"], r
