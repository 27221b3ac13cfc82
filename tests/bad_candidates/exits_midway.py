"""Calls sys.exit(0) in the middle of a call."""
import sys

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    sys.exit(0)
