"""Honest: the right values in a non-contiguous layout (channels-last storage, then a view with
every other element of a larger tensor)."""

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, _ = data
    result = F.conv2d(input_tensor, kernel)
    wide = torch.empty((*result.shape[:-1], 2 * result.shape[-1]), dtype=result.dtype, device=result.device)
    strided = wide[..., ::2]
    strided.copy_(result)
    assert not strided.is_contiguous()
    return strided
