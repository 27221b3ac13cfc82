import harness_tests_module_nobody_has  # noqa: F401
import torch


def generate_input(size: int, seed: int, device: str = "cuda"):
    return (torch.zeros(size, device=device),)


def ref_kernel(data):
    return data[0].clone()


def check_implementation(data, output):
    return torch.equal(data[0], output)
