"""Forks three processes that each fill and hold 512 MiB (every one under a per-process address
space limit that leaves it room), then waits: only the sum over the processes is too much.
Every process it makes is named "limits-memory" (its comm), so a test can look for them."""
import os
import time

from task import input_t, output_t

CHUNK = 512 * 1024**2


def custom_kernel(data: input_t) -> output_t:
    with open("/proc/self/comm", "w") as comm:
        comm.write("limits-memory")
    for _ in range(3):
        if os.fork() == 0:
            held = b"\x01" * CHUNK  # noqa: F841 - touched, so resident
            while True:
                time.sleep(1)
    time.sleep(600)
    return data[2]
