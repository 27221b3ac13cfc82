import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    # leaves the buffers alone and answers with new tensors
    x, _q_out, s_out = data
    blocks = x.view(s_out.numel(), -1)
    scales = blocks.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(blocks / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q.view(-1), scales
