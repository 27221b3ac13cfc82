"""Reads address 0 in the call (SIGSEGV)."""
import ctypes

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    ctypes.string_at(0)
