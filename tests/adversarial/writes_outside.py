"""Hostile: writes a file where the sandbox must keep it from writing (the harness's own package,
which every child imports, and the interpreter's prefix: a virtualenv the user owns), at import;
raises if a write went through, so that a sandbox left writable is its `runtime_error`, and passes
as the reference otherwise. (Its home is its own private working folder: no target.)"""

import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False

WRITTEN = []
harness = sys.modules.get("harness")
for folder in (Path(harness.__file__).parent if harness else None, Path(sys.prefix)):
    if folder is None:
        continue
    target = folder / f".written-by-a-candidate-{os.getpid()}"
    try:
        target.write_text("a candidate wrote this\n")
    except OSError:
        continue
    target.unlink()
    WRITTEN.append(str(folder))


def custom_kernel(data: input_t) -> output_t:
    if WRITTEN:
        raise RuntimeError(f"wrote outside the sandbox: {', '.join(WRITTEN)}")
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
