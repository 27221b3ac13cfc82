from typing import TypeVar

import torch

input_t = TypeVar("input_t", bound=dict[str, torch.Tensor | float])
output_t = TypeVar("output_t", bound=torch.Tensor)
