"""Honest: splits the batch-and-channel work over several threads and joins them before it
returns, writing into the output buffer."""

import threading

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    channels = kernel.shape[0]

    def work(channel: int) -> None:
        output[:, channel : channel + 1].copy_(F.conv2d(input_tensor, kernel[channel : channel + 1]))

    threads = [threading.Thread(target=work, args=(channel,)) for channel in range(channels)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return output
