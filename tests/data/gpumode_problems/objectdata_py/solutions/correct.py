import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    config, x, cache = data
    with torch.no_grad():
        shifted = (x * config.scale + config.bias + config.shift.weight * config.shift.values).to(
            config.dtype
        )
        data = cache.data.clone()
        data[0] = shifted[0]
        return shifted @ cache.project.weight.T + data * (cache.filled + cache._step)
