import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    config, x, cache = data
    with torch.no_grad():
        shifted = (x * config.scale + config.bias + config.shift.weight * config.shift.values).to(
            config.dtype
        )
        return shifted @ cache.project.weight.T  # forgets the cache's own buffer
