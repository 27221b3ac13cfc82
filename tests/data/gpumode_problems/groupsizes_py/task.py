from typing import TypeVar

import torch

input_t = TypeVar("input_t", bound=tuple[list[torch.Tensor], torch.Tensor, list[list[float]]])
output_t = TypeVar("output_t", bound=list[torch.Tensor])
