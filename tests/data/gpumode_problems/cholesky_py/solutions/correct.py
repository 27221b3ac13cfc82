import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    # another factorisation than the reference's: computed in float64, rounded once
    return torch.linalg.cholesky(data.double()).float()
