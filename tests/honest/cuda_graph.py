"""Honest (CUDA only): captures cuDNN's convolution into a CUDA graph per input shape, on static
buffers, and replays it: each call copies its inputs into the static buffers, replays, and copies
the result into the output buffer, all on the current stream."""

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
graphs = {}


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    if input_tensor.device.type != "cuda":
        return output.copy_(F.conv2d(input_tensor, kernel))
    key = (tuple(input_tensor.shape), tuple(kernel.shape))
    if key not in graphs:
        static_in, static_k = input_tensor.clone(), kernel.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                F.conv2d(static_in, static_k)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = F.conv2d(static_in, static_k)
        graphs[key] = (graph, static_in, static_k, static_out)
    graph, static_in, static_k, static_out = graphs[key]
    static_in.copy_(input_tensor)
    static_k.copy_(kernel)
    graph.replay()
    output.copy_(static_out)
    return output
