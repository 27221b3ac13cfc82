import torch

input_t = tuple[torch.Tensor]
output_t = torch.Tensor
