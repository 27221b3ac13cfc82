"""Honest (CUDA; one stream on the CPU): splits the batch over two CUDA streams and joins both
into the current stream before it returns."""

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
streams = []


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    if input_tensor.device.type != "cuda" or input_tensor.shape[0] < 2:
        return output.copy_(F.conv2d(input_tensor, kernel))
    if not streams:
        streams.extend(torch.cuda.Stream() for _ in range(2))
    current = torch.cuda.current_stream()
    half = input_tensor.shape[0] // 2
    parts = [(slice(0, half), streams[0]), (slice(half, None), streams[1])]
    for rows, stream in parts:
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            output[rows].copy_(F.conv2d(input_tensor[rows], kernel))
    for _rows, stream in parts:
        current.wait_stream(stream)
    return output
