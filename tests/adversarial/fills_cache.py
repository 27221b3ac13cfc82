"""Writes 64 MiB into its per-code Triton cache, which outlives the run (issue 15), then waits."""
import os
import time

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    with open(os.path.join(os.environ["TRITON_CACHE_DIR"], "fill.bin"), "wb") as target:
        for _ in range(64):
            target.write(b"\x01" * 1024**2)
    time.sleep(600)
    return data[2]
