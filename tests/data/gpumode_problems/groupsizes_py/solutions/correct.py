from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    xs, w, scales = data
    return [(x * w).sum(dim=1) * scale + shift for x, (scale, shift) in zip(xs, scales, strict=True)]
