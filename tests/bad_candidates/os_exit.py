"""Leaves with os._exit(3) in the call, skipping all cleanup."""
import os

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    os._exit(3)
