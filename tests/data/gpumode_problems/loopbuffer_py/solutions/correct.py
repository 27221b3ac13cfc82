from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    *terms, out = data
    out.copy_(terms[0])
    for term in terms[1:]:
        out += term
    return out
