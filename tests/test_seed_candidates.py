"""The candidate files under candidates/: they compile, and the ones that run on a CPU compute
conv2d correctly under the Triton interpreter, for every autotune config.

Each candidate runs in its own subprocess (this file is also the child program, see `_child`):
TRITON_INTERPRET must be set before triton is imported, and each candidate sets global torch
flags at import. The child runs with `python -O` because the KernelAgent-style wrappers assert
`is_cuda` on their inputs; the interpreter runs on CPU tensors, and nothing else changes.
"""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

CANDIDATES_DIR = Path(__file__).resolve().parent.parent / "candidates"
CANDIDATE_FILES = sorted(CANDIDATES_DIR.glob("*.py"))

# batch, channels (in == out, as in conv2d_v2), height, width, kernel size (square)
SHAPES = [(1, 3, 8, 8, 3), (2, 4, 12, 10, 2), (1, 4, 9, 11, 4)]
TOLERANCE = 1e-3

TASK_SHIM = "input_t = output_t = tuple\n"


def _needs_cuda_extension(source: str) -> bool:
    """A candidate that builds a CUDA extension at import cannot run on a CPU-only machine."""
    return "load_inline" in source or "cuda_sources" in source


RUNNABLE = [path for path in CANDIDATE_FILES if not _needs_cuda_extension(path.read_text(encoding="utf-8"))]


def test_the_candidates_directory_holds_the_seed_revisions_and_the_reference():
    names = {path.name for path in CANDIDATE_FILES}
    for lineage in ("conv2d_a100_ultra", "conv2d_parallel_oh", "conv2d_cudnn_wrap"):
        assert {f"{lineage}_before.py", f"{lineage}.py"} <= names
    assert "conv2d_v2_reference.py" in names


@pytest.mark.parametrize("path", CANDIDATE_FILES, ids=lambda path: path.name)
def test_candidate_compiles(path: Path, tmp_path: Path):
    py_compile.compile(str(path), cfile=str(tmp_path / "candidate.pyc"), doraise=True)


def test_manifest_lists_existing_files_in_lineage_order():
    manifest = yaml.safe_load((CANDIDATES_DIR / "manifest.yml").read_text(encoding="utf-8"))
    lineages = {lineage["name"]: lineage for lineage in manifest["lineages"]}
    assert manifest["lineages"][0]["name"] == "conv2d_v2_reference"
    for lineage in manifest["lineages"]:
        assert lineage["author"]
        for revision in lineage["revisions"]:
            assert (CANDIDATES_DIR / revision["file"]).is_file(), revision["file"]
            assert revision["message"]
    for name, submission_id in [
        ("conv2d_a100_ultra", 99237),
        ("conv2d_parallel_oh", 512024),
        ("conv2d_cudnn_wrap", 779808),
    ]:
        before, after = lineages[name]["revisions"]
        assert before["file"] == f"{name}_before.py" and "id" not in before
        assert after["file"] == f"{name}.py" and after["id"] == submission_id


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda path: path.name)
def test_candidate_computes_conv2d_for_every_autotune_config(path: Path, tmp_path: Path):
    (tmp_path / "task.py").write_text(TASK_SHIM)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(tmp_path)}
    completed = subprocess.run(
        [sys.executable, "-O", __file__, str(path)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["checked"] == len(SHAPES) * max(1, report["configs"])
    failures = [case for case in report["cases"] if not case["ok"]]
    assert not failures, failures


def _child(path: Path) -> dict:
    """Run one candidate on every shape under every autotune config; report each case.

    `@triton.autotune` cannot benchmark in the interpreter, so each Autotuner's `configs` is
    replaced by one config at a time (a single config skips benchmarking in triton 3.x).
    Kernels without an autotuner run once per shape.
    """
    import importlib.util

    import torch
    import triton  # noqa: F401  (TRITON_INTERPRET is read at import)
    from triton.runtime.autotuner import Autotuner

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    autotuners = [value for value in vars(module).values() if isinstance(value, Autotuner)]
    original_configs = {id(tuner): list(tuner.configs) for tuner in autotuners}
    settings: list[tuple[str, Autotuner | None, object]] = [
        (str(config), tuner, config) for tuner in autotuners for config in original_configs[id(tuner)]
    ] or [("no autotune", None, None)]

    cases = []
    for label, tuner, config in settings:
        for other in autotuners:
            other.configs = original_configs[id(other)][:1]
        if tuner is not None:
            tuner.configs = [config]
        for batch, channels, height, width, size in SHAPES:
            generator = torch.Generator().manual_seed(batch * 1000 + channels * 100 + height * 10 + size)
            x = torch.randn(batch, channels, height, width, generator=generator)
            w = torch.randn(channels, channels, size, size, generator=generator)
            expected = torch.nn.functional.conv2d(x.double(), w.double())
            out = torch.full(expected.shape, float("nan"), dtype=torch.float32)
            if hasattr(module, "custom_kernel"):
                result = module.custom_kernel((x, w, out))
            else:
                result = module.kernel_function(x, w, out)
            ok = bool(
                result is not None
                and result.shape == expected.shape
                and torch.allclose(result.double(), expected, rtol=TOLERANCE, atol=TOLERANCE)
                and torch.allclose(out.double(), expected, rtol=TOLERANCE, atol=TOLERANCE)
            )
            max_error = float((result.double() - expected).abs().max()) if result is not None else None
            cases.append(
                {
                    "config": label,
                    "shape": [batch, channels, height, width, size],
                    "ok": ok,
                    "max_error": max_error,
                }
            )
    configs = sum(len(configs) for configs in original_configs.values())
    return {"configs": configs, "checked": len(cases), "cases": cases}


if __name__ == "__main__":
    print(json.dumps(_child(Path(sys.argv[1]))))
