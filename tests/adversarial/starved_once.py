"""An honest candidate starved once: its first evaluation finds no memory left (as beside a
neighbour that holds the GPU's: issue 33, item 4) and fails with the allocator's words; every
later one (a marker in its per-code cache, which outlives the child) computes the answer."""
import os
from pathlib import Path

import torch.nn.functional as F
from task import input_t, output_t

MARKER = Path(os.environ.get("TRITON_CACHE_DIR", "."), "starved-once")
starved = not MARKER.exists()
if starved:
    MARKER.parent.mkdir(parents=True, exist_ok=True)
    MARKER.write_text("starved once\n")


def custom_kernel(data: input_t) -> output_t:
    if starved:
        raise RuntimeError("CUDA error: out of memory (the GPU's memory is held by another process)")
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
