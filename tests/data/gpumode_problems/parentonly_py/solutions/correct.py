import sys

from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    assert "reference" not in sys.modules, "the harness imported the task's reference in the child"
    x, weights, (shift, (scale, how)), offset, out = data
    assert isinstance(shift, int) and isinstance(scale, float) and isinstance(offset, int) and how == "sum"
    assert x.shape[0] == 3 and x.stride() == (1, 3), "the transposed input keeps its stride"
    out[...] = (weights[:, None] * x).sum(0) * scale + shift + offset
    return out
