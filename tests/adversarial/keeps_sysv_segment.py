"""Leaves a SysV shared memory segment behind for a later revision to read (issue 33, item 9: a
channel between revisions), and reaches for the host's segment and message queue under the key
the test made. Fails its own call (runtime_error) when it reached anything not its own: a segment
under its key left by another sandbox, or the host's. Passes otherwise."""

import ctypes
import os

import torch.nn.functional as F
from task import input_t, output_t

IPC_CREAT, IPC_EXCL = 0o1000, 0o2000
OWN_KEY = 0x48415253  # the segment it leaves behind
HOST_KEY = 0x48415354  # the segment and queue the test made on the host
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]

reached = []
if libc.shmget(HOST_KEY, 0, 0) >= 0:
    reached.append("the host's segment")
if libc.msgget(HOST_KEY, 0) >= 0:
    reached.append("the host's message queue")
found = libc.shmget(OWN_KEY, 0, 0)
if found >= 0:
    address = libc.shmat(found, None, 0)
    reached.append(f"a segment left by another sandbox: {ctypes.string_at(address, 16)!r}")
else:
    segment = libc.shmget(OWN_KEY, 1 << 20, IPC_CREAT | IPC_EXCL | 0o666)
    address = libc.shmat(segment, None, 0)
    ctypes.memmove(address, f"pid {os.getpid()} was here".encode(), 16)
    libc.shmdt(ctypes.c_void_p(address))  # detached, not removed: it would outlive the process


def custom_kernel(data: input_t) -> output_t:
    if reached:
        raise RuntimeError("reached " + "; ".join(reached))
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
