from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    out = data["out"]
    out.copy_(data["x"])
    out *= data["scale"]
    return out
