import gc
import weakref

import torch

# A machine whose memory holds a few of this task's inputs at once: generate_input fails as an
# allocator does when more than ROOM of the inputs it made are still alive in the process (the
# parent's kept cases among them). Written for the harness's tests (pmpp's grayscale on an H100,
# whose 4 GiB cases kept by the parent left its own check no room).
ROOM = 6
_alive = weakref.WeakSet()


def generate_input(size: int, seed: int, device: str = "cuda"):
    gc.collect()
    if len(_alive) >= ROOM:
        raise MemoryError(f"out of memory: {len(_alive)} inputs of this task alive, room for {ROOM}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = torch.randn(size, device=device, generator=gen)
    _alive.add(x)
    return x, torch.empty(size, device=device)


def ref_kernel(data):
    x, out = data
    torch.neg(x, out=out)
    return out


def check_implementation(data, output):
    return torch.equal(output, -data[0])
