"""Correct, but leaves spinners running (a thread in its own process, a process in a new session
and, on a GPU, a thread that keeps launching matrix products) that work while the other
revisions are timed and pause during its own calls. Each spinner beats every few milliseconds
and prints every pause it did not choose (a gap between two beats over 20 ms, on the monotonic
clock) as `spinner <kind> gap <from> <to>`."""
import ctypes
import mmap
import os
import threading
import time

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False  # correct on the GPU too: only the spinners are at issue
GAP_S = 0.02
_own_call = mmap.mmap(-1, 1)  # shared with the forked spinner: 1 while a call of ours runs


def _spin(kind: str) -> None:
    matrix = torch.randn(1024, 1024, device="cuda") if kind == "gpu" else None
    last = time.monotonic()
    while True:
        now = time.monotonic()
        if now - last > GAP_S:
            print(f"spinner {kind} gap {last:.4f} {now:.4f}", flush=True)
        last = now
        if _own_call[0]:
            time.sleep(0.001)  # quiet while our own calls are timed
            continue
        if matrix is not None:
            matrix = (matrix @ matrix).clamp_(-1, 1)
            torch.cuda.synchronize()
        else:
            while time.monotonic() - now < 0.001:
                pass  # a real spinner would burn every core; this one burns about a fifth of one
        time.sleep(0.004)


if os.fork() == 0:
    os.setsid()
    ctypes.CDLL(None).prctl(15, b"hx-spinner", 0, 0, 0)  # PR_SET_NAME, for the test to find it
    _spin("process")
    os._exit(0)
threading.Thread(target=_spin, args=("thread",), daemon=True).start()
if torch.cuda.is_available():
    threading.Thread(target=_spin, args=("gpu",), daemon=True).start()


def custom_kernel(data: input_t) -> output_t:
    _own_call[0] = 1
    try:
        input_tensor, kernel, output = data
        output.copy_(F.conv2d(input_tensor, kernel))
        return output
    finally:
        _own_call[0] = 0
