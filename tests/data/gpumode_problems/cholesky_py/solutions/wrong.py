import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    # L^T: the right values in the wrong triangle
    return torch.linalg.cholesky(data).transpose(-1, -2).contiguous()
