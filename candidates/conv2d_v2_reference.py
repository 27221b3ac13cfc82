#!POPCORN leaderboard conv2d_v2
"""Reference candidate: cuDNN through torch.nn.functional.conv2d, with TF32 off.

The baseline the other revisions are ranked against. TF32 is switched off so that cuDNN
computes in full fp32 (the task's checker compares against an fp32 result), and cuDNN is asked
for deterministic algorithms so that repeated runs give the same bits.
"""
from task import input_t, output_t
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel, stride=1, padding=0))
    return output
