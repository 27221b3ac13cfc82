"""Sleeps 20 ms in the child's NaN fill of its first HIDDEN_FILLS calls (checks, warm-ups and
timed calls alike), then computes honestly: the parent's brackets of its first blocks look like
a host loaded through every call of them (issue 28: an honest child of `harness evolve` was
flagged `host_clock_mismatch` that way on a loaded 2-core CI machine). With HIDDEN_FILLS as
large as any run's calls it is a cheat that hides 20 ms in every call.
"""
import sys
import time

import torch.nn.functional as F
from task import input_t, output_t

HIDDEN_FILLS = 16
_fills = [0]
_fill = sys.modules["__main__"].Worker.fill_output_buffer


def _sleepy_fill(worker, data) -> None:
    _fills[0] += 1
    if _fills[0] <= HIDDEN_FILLS:
        time.sleep(0.02)
    _fill(worker, data)


sys.modules["__main__"].Worker.fill_output_buffer = _sleepy_fill


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    return output.copy_(F.conv2d(input_tensor, kernel))
