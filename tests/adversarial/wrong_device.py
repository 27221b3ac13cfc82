"""Returns the right values on the meta device (no data at all): a tensor of the wrong device."""
import torch.nn.functional as F
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, _output = data
    return F.conv2d(input_tensor, kernel).to("meta")
