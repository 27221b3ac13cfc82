"""Finds the directory it shares with the parent (the writable mount whose path has
"harness-io-" in it, from /proc/self/mountinfo; without a mount namespace its working directory)
and writes 512 MiB there, which is on the host's /dev/shm or disk, then waits."""
import os
import time

from task import input_t, output_t


def _shared_directory() -> str:
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = line.split()[4]
            if "harness-io-" in point:
                return point
    return os.getcwd()


def custom_kernel(data: input_t) -> output_t:
    with open(os.path.join(_shared_directory(), "fill.bin"), "wb") as target:
        for _ in range(128):
            target.write(b"\x01" * 4 * 1024**2)
            target.flush()
            time.sleep(0.01)
    time.sleep(600)
    return data[2]
