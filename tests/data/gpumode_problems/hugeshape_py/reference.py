import torch


def generate_input(size: int, seed: int, device: str = "cuda"):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return torch.randn(size, device=device, generator=gen), torch.empty(size, device=device)


def ref_kernel(data):
    x, out = data
    torch.neg(x, out=out)
    return out


def check_implementation(data, output):
    return torch.equal(output, -data[0])
