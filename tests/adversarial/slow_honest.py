"""An honest slow kernel: the right answer, 20 ms a call (a revision timed beside the spinner)."""
import time

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    if output.is_cuda:
        torch.cuda.synchronize()
    time.sleep(0.02)
    return output
