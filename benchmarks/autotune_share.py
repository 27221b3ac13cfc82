#!/usr/bin/env python3
"""How much of a candidate's first call on each conv2d_v2 benchmark shape is Triton compiling and
how much is its autotuner benchmarking configs on the GPU (issue 17: what compiling ahead on the
CPU could save). Run on a GPU node from the repository root, outside the sandbox, on trusted files:

    python benchmarks/autotune_share.py candidates/conv2d_a100_ultra.py candidates/conv2d_parallel_oh.py

Empty Triton cache; the tests shapes first (as the test phase does); then per benchmark shape the
first call (compile and tune), the same call after the tuners forget their choices (tune only: the
kernels are compiled), and a plain call. First minus retune is the compile time.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
PROBLEM = Path(__file__).resolve().parent.parent / "harness" / "tasks" / "problems" / "conv2d_v2_py"
sys.path[:0] = [str(PROBLEM), str(PROBLEM.parent)]

import torch
import triton
from reference import generate_input

TESTS = [(32, 4, 16, 1), (64, 8, 32, 2), (128, 8, 64, 1)]
BENCHMARKS = [(128, 8, 64, 4), (128, 16, 64, 4), (256, 16, 128, 2), (256, 32, 128, 1)]


def timed_call(module, shape: tuple[int, int, int, int]) -> float:
    size, kernelsize, channels, batch = shape
    data = generate_input(size=size, kernelsize=kernelsize, channels=channels, batch=batch, seed=1)
    torch.cuda.synchronize()
    started = time.perf_counter()
    if hasattr(module, "custom_kernel"):
        module.custom_kernel(data)
    else:
        module.kernel_function(*data)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    for path in sys.argv[1:]:
        spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tuners = [v for v in vars(module).values() if isinstance(v, triton.runtime.autotuner.Autotuner)]
        started = time.perf_counter()
        for shape in TESTS:
            timed_call(module, shape)
        print(f"{path} tests shapes (cold) {time.perf_counter() - started:.1f} s", flush=True)
        for shape in BENCHMARKS:
            first = timed_call(module, shape)
            for tuner in tuners:
                tuner.cache.clear()
            retune = timed_call(module, shape)
            plain = timed_call(module, shape)
            print(
                f"  {shape} first {first:.2f} s, retune {retune:.2f} s "
                f"(compile ~{first - retune:.2f} s), plain {plain:.4f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
