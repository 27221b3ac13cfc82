"""Imports fine but defines neither custom_kernel nor kernel_function."""
from task import input_t, output_t


def convolve(data: input_t) -> output_t:
    return data[2]
