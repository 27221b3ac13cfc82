import torch

input_t = tuple[torch.Tensor, int]
output_t = tuple[torch.Tensor, torch.Tensor]
