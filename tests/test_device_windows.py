"""Device windows (harness.sandbox.device_memory, opt-in with HARNESS_DEVICE_WINDOWS=auto): on a
GPU the calls' inputs and outputs go between parent and child through device memory the parent
allocates and hands over by a file descriptor, not through host memory. On the CPU the memfd road
is the only one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from harness.config import CANDIDATES_DIR
from harness.sandbox import device_memory
from harness.sandbox.evaluation import Evaluator, evaluate_interleaved
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.supervisor import ChildProcess
from harness.tasks import load_task
from harness.timing import StoppingRule

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TASK = load_task("conv2d_v2")
REFERENCE = (CANDIDATES_DIR / "conv2d_v2_reference.py").read_bytes()


def test_without_a_gpu_no_window_is_made_and_the_child_gets_no_fd_socket(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("HARNESS_DEVICE_WINDOWS", "auto")
    assert device_memory.supported() is False
    child = ChildProcess(
        REFERENCE, TASK, device="cpu", limits=SandboxLimits.from_settings(), code_sha256="windows-cpu"
    )
    try:
        assert child.uses_device_windows() is False
        assert child.start().type == "ready"
        assert child.fd_socket is None
    finally:
        child.close()


@needs_cuda
def test_a_window_made_here_is_written_by_a_process_in_namespaces_of_its_own():
    """The parent's memory, its descriptor inherited by a process in its own pid namespace (where
    `unshare` may make one) that maps it, reads what the parent wrote and writes back."""
    window = device_memory.DeviceWindow.create(3 * 1024**2)
    values = window.ensure(window.size).view(torch.float32)
    values.copy_(torch.arange(values.numel(), device=values.device, dtype=torch.float32))
    torch.cuda.synchronize()
    script = textwrap.dedent(
        f"""
        import torch
        from harness.sandbox.device_memory import DeviceWindow
        torch.zeros(1, device="cuda")
        window = DeviceWindow.open({window.fd}, {window.size})
        values = window.ensure({window.size}).view(torch.float32)
        print(float(values[:1000].sum()))
        values[:4] = -1.0
        window.close()
        """
    )
    prefix = ["unshare", "-U", "-r", "-p", "-f", "--mount-proc"]  # CUDA wants the namespace's /proc
    allowed = subprocess.run([*prefix, "true"], check=False, capture_output=True).returncode == 0
    done = subprocess.run(
        [*(prefix if allowed else []), sys.executable, "-c", script],
        check=False,
        pass_fds=(window.fd,),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split()[-1]) == sum(range(1000))
    torch.cuda.synchronize()
    assert values[:5].tolist() == [-1.0, -1.0, -1.0, -1.0, 4.0]
    window.close()


@needs_cuda
def test_timed_inputs_and_outputs_go_through_device_windows_and_every_output_is_checked(monkeypatch):
    """The reference timed on the GPU on two shapes: both windows are handed over (inputs and
    outputs), the output window grown for the larger shape, and it passes with every checked and
    timed output judged against its seed's reference, the checked ones read from the window."""
    monkeypatch.setenv("HARNESS_DEVICE_WINDOWS", "auto")  # opt-in (harness.config)
    sent: list[tuple[str, int]] = []
    original = ChildProcess.send_window

    def recorded(child, purpose, size, phase):
        window = original(child, purpose, size, phase)
        sent.append((purpose, window.size))
        return window

    monkeypatch.setattr(ChildProcess, "send_window", recorded)
    task = TASK.model_copy(update={"benchmarks": TASK.tests[3:5]})
    rule = StoppingRule(min_runs=5, max_runs=10, budget_s=0.5)
    (honest,) = evaluate_interleaved(
        [Evaluator(REFERENCE, "reference.py", task, device="cuda", timed=True, rule=rule)]
    )
    assert honest.status == "pass", honest.reason
    assert all(shape.runs >= 5 and shape.timing_flags == [] for shape in honest.shapes), [
        shape.check.timing for shape in honest.shapes
    ]
    # the candidate's child and the harness's calibration child: 0.8 MB of output, then 3.7 MB
    for shape in honest.shapes:  # the checked call's output came back in the window too
        assert shape.check.output.shared is True, shape.check.output
    outputs = [size for purpose, size in sent if purpose == "output"]
    assert min(outputs) < 3_700_000 <= max(outputs), sent
    assert any(purpose == "inputs" for purpose, _ in sent), sent


@needs_cuda
def test_an_out_of_memory_window_says_so_in_the_words_a_retry_looks_for():
    """A window larger than the GPU fails with the driver's out-of-memory error by name: beside a
    child that holds the GPU's memory, the revision is evaluated again, not failed."""
    from harness.checking import says_out_of_memory

    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(device_memory.DeviceMemoryError) as failure:
        device_memory.DeviceWindow.create(4 * total)
    assert says_out_of_memory(str(failure.value)), str(failure.value)
