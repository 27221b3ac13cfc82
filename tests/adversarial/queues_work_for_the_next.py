"""Cheat: a correct convolution that, after each call, queues a third of a second of matrix
products on a side stream and returns without waiting for them (torch.cuda.synchronize made to
wait for the current stream only, so that the harness's own wait in this process passes them
by). Stopped after its turn, its queued kernels still run and share the GPU with whichever
revision is timed next: the reference, slowed, would rank below it."""
import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False
torch.cuda.synchronize = lambda device=None: torch.cuda.current_stream().synchronize()
_side = None
_burden = None


def custom_kernel(data: input_t) -> output_t:
    global _side, _burden
    x, w, out = data
    if _side is None:
        _side = torch.cuda.Stream()
        _burden = torch.rand(4096, 4096, device="cuda")
    out.copy_(F.conv2d(x, w))
    with torch.cuda.stream(_side):
        for _ in range(100):  # about 3 ms each in fp32 on an H100
            torch.mm(_burden, _burden)
    return out
