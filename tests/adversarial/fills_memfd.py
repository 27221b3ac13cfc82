"""Writes 2.25 GiB into a memfd with write() (issue 33, item 9): the pages are in no process's
resident set, so a watch that sums RSS does not see them; a memory cgroup counts them."""

import os

import torch.nn.functional as F
from task import input_t, output_t

held = []


def custom_kernel(data: input_t) -> output_t:
    if not held:
        fd = os.memfd_create("hoard")
        chunk = b"\x5a" * (64 * 1024**2)
        for _ in range(36):  # 2.25 GiB
            os.write(fd, chunk)
        held.append(fd)
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
