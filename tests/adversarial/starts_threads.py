"""Starts 2000 threads that sleep (issue 33, item 9: tasks, not processes: a watch that counts
processes sees one)."""

import threading
import time

import torch.nn.functional as F
from task import input_t, output_t

sleepers = []


def custom_kernel(data: input_t) -> output_t:
    while len(sleepers) < 2000:
        thread = threading.Thread(target=time.sleep, args=(600,), daemon=True)
        thread.start()
        sleepers.append(thread)
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
