"""GPU MODE's task.py for conv2d_v2: the types a submission imports (`from task import input_t,
output_t`). Copied into the candidate's working directory as task.py."""

from typing import TypedDict, TypeVar

import torch

input_t = TypeVar("input_t", bound=tuple[torch.Tensor, torch.Tensor, torch.Tensor])
output_t = TypeVar("output_t", bound=torch.Tensor)


class TestSpec(TypedDict):
    size: int
    kernelsize: int
    channels: int
    batch: int
    seed: int
