from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    *terms, _out = data
    for term in terms[1:]:
        terms[0] += term
    return terms[0].clone()
