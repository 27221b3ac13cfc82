"""Honest: computes the negated convolution and returns its lazy negation (a tensor with the
negative bit set, torch._neg_view), which holds the right values."""

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, _ = data
    negated = F.conv2d(input_tensor, -kernel)
    result = torch._neg_view(negated)
    assert result.is_neg()
    return result
