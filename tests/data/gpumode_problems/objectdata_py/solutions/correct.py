import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    config, x, cache = data
    with torch.no_grad():
        return (x * config.scale + config.bias + config.shift.weight * config.shift.values).to(
            config.dtype
        ) @ cache.project.weight.T + cache.data * cache.filled
