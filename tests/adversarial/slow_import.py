"""An honest candidate that takes IMPORT_S seconds to import (as an extension build can): longer
than a child's start-up deadline (startup_timeout_s), well within the import deadline. It keeps
the CPU free meanwhile."""
import time

import torch.nn.functional as F
from task import input_t, output_t

IMPORT_S = 150

time.sleep(IMPORT_S)


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
