import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    config, x, cache = data
    with torch.no_grad():  # forgets the cache's own buffer
        return (x * config.scale + config.bias + config.shift.weight * config.shift.values).to(
            config.dtype
        ) @ cache.project.weight.T
