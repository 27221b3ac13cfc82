"""Fills 2.25 GiB of SysV shared memory, nine segments of 256 MiB, each attached, filled and
detached in turn (issue 33, item 9): under any address-space limit, out of every process's
resident set once detached, kept by the IPC namespace, not by a process."""

import ctypes

import torch.nn.functional as F
from task import input_t, output_t

IPC_PRIVATE, IPC_CREAT = 0, 0o1000
SIZE = 256 * 1024**2
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
done = []


def custom_kernel(data: input_t) -> output_t:
    while len(done) < 9:
        segment = libc.shmget(IPC_PRIVATE, SIZE, IPC_CREAT | 0o600)
        address = libc.shmat(segment, None, 0) if segment >= 0 else None
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "shmget/shmat")
        libc.memset(ctypes.c_void_p(address), 0x5A, SIZE)
        libc.shmdt(ctypes.c_void_p(address))
        done.append(segment)
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
