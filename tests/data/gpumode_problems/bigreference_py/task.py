import torch

input_t = tuple[torch.Tensor, int]
output_t = torch.Tensor
