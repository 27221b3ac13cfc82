"""A slow kernel that keeps the child's timing going: it replaces the clock the child's timing loop
reads (harness.timing's perf_counter) with one that crawls and jitters, so that by that clock the
warm-up's seconds and the rule's budget never pass and no two calls seem alike (the standard
error never settles). An honest child's loop ends within its budget; this one would run to the
rule's largest count of calls, tying up the GPU for everyone timed after it."""

import random
import sys
import time

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False  # the answer itself is honest strict fp32
_now = [0.0]


def _crawling_clock() -> float:
    _now[0] += random.uniform(1e-8, 2e-6)
    return _now[0]


for _module in list(sys.modules.values()):
    if getattr(_module, "__name__", "").startswith("harness") and hasattr(_module, "perf_counter"):
        _module.perf_counter = _crawling_clock


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    time.sleep(0.005)  # the real work is slow
    return output
