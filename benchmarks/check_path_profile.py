#!/usr/bin/env python3
"""Milliseconds of each step of one check's path on a large shape, in one process (no sandbox):
the inputs' hand-over (the parent writes them into its memfd, the child rebuilds them on its
device), what the child does after the call (copy of the inputs, the output's export, the inputs'
comparison) and what the parent does (read back, compare, judge the inputs), then the isolation
probe and a child's start. For finding where a check's overhead goes on a GPU.

    python benchmarks/check_path_profile.py [--device cuda] [--shape 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from harness import checking
from harness.sandbox import isolation
from harness.sandbox.transfer import (
    InputsWriter,
    SharedBuffer,
    changed_elements,
    describe,
    export_tensor,
    read_inputs,
    read_tensor,
)
from harness.sandbox.workspace import create_shared_memory
from harness.tasks import load_reference, load_task
from harness.wire import CheckReply


def timed(label: str, function, repeats: int, device: str, results: dict) -> object:
    values = []
    out = None
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        out = function()
        if device == "cuda":
            torch.cuda.synchronize()
        values.append((time.perf_counter() - started) * 1e3)
    results[label] = values
    print(f"{label:<44} first {values[0]:8.2f} ms   median {statistics.median(values):8.2f} ms", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", type=int, default=2, help="index in the task's benchmarks")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    task = load_task("conv2d_v2")
    reference = load_reference(task)
    shape = task.shapes("benchmarks")[args.shape]
    device, repeats, results = args.device, args.repeats, {}
    print(f"{device} {torch.cuda.get_device_name() if device == 'cuda' else ''}; shape {shape.parameters}")
    case = timed(
        "parent: reference case (fp32 + float64)",
        lambda: checking.make_reference_case(reference, shape, shape.seed, device),
        1,
        device,
        results,
    )
    layout = checking.data_layout(task, device, case.data)
    memfd = create_shared_memory("harness-inputs")
    writer, reader = InputsWriter(memfd, cuda=device == "cuda"), SharedBuffer(memfd, cuda=device == "cuda")
    items = timed(
        "parent: write the inputs into the memfd",
        lambda: writer.write(case.data, layout.outputs),
        repeats,
        device,
        results,
    )
    data = timed(
        "child: rebuild the inputs on the device",
        lambda: read_inputs(items, reader, device),
        repeats,
        device,
        results,
    )
    inputs = [data[i] for i in layout.tensor_inputs(data)]
    output = case.expected.clone()
    io = Path(tempfile.mkdtemp(prefix="harness-io-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    io_fd = os.open(io, os.O_RDONLY | os.O_DIRECTORY)
    before = timed("child: copy the inputs", lambda: [t.clone() for t in inputs], repeats, device, results)
    info = timed(
        "child: export the output (new file)",
        lambda: export_tensor(output, io / "out.bin"),
        repeats,
        device,
        results,
    )
    timed(
        "child: compare inputs with the copies",
        lambda: [changed_elements(b, a) for b, a in zip(before, inputs)],
        repeats,
        device,
        results,
    )
    received = timed(
        "parent: read the output back",
        lambda: read_tensor(io_fd, "out.bin", info, device),
        repeats,
        device,
        results,
    )
    timed(
        "parent: compare_output",
        lambda: checking.compare_output(received, case, rtol=task.rtol, atol=task.atol),
        repeats,
        device,
        results,
    )
    reply = CheckReply(
        token="t",
        id=1,
        inputs=[describe(t) for t in inputs],
        inputs_changed=[0] * len(inputs),
    )
    timed(
        "parent: judge the inputs",
        lambda: checking.inputs_problem(task, case, reply),
        repeats,
        device,
        results,
    )
    wrong = received.clone()
    wrong.view(-1)[::1000] += 1.0
    timed(
        "parent: compare_output, 0.1% wrong",
        lambda: checking.compare_output(wrong, case, rtol=task.rtol, atol=task.atol),
        2,
        device,
        results,
    )
    timed(
        "isolation probe (detect_isolation, fresh)",
        lambda: isolation._probe_isolation(device),
        1,
        device,
        results,
    )
    for code in ("pass", "import torch", f"import torch; torch.zeros(1, device='{device}')"):
        timed(
            f"python -c {code[:34]!r}",
            lambda code=code: subprocess.run([sys.executable, "-c", code], check=True),
            2,
            "cpu",
            results,
        )


if __name__ == "__main__":
    main()
