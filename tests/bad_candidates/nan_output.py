"""Writes NaN everywhere."""
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.fill_(float("nan"))
    return output
