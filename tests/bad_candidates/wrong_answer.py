"""Wrong answer: convolves with the kernel flipped (a correlation/convolution mix-up)."""
from task import input_t, output_t
import torch.nn.functional as F


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel.flip(-1, -2)))
    return output
