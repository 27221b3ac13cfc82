"""Tries to kill its parent and every other process it can see with SIGKILL, then computes the
right answer. In the pid namespace its parent is the sandbox's init, which the kernel does not
let a process of the namespace kill."""
import os
import signal

import torch.nn.functional as F
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    me = os.getpid()
    targets = [os.getppid()] + [int(name) for name in os.listdir("/proc") if name.isdigit()]
    for pid in dict.fromkeys(targets):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    print("kills_parent: alive after the kills, visible pids", sorted(int(n) for n in os.listdir("/proc") if n.isdigit()), flush=True)
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
