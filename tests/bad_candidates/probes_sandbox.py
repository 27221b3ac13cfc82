"""Tries to reach outside its sandbox; computes the right answer only when every attempt failed,
and otherwise raises naming what it reached."""
import os
import socket
import sys

import torch.nn.functional as F
from task import input_t, output_t

project_dir = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["harness"].__file__)))


def _attempts():
    reached = []
    if any(key.startswith("HARNESS_") for key in os.environ):
        reached.append("HARNESS_ environment")
    db_dir = os.path.join(project_dir, "db")
    if os.path.isdir(db_dir) and os.listdir(db_dir):
        reached.append(f"store directory {db_dir}")
    for target in (os.path.join(project_dir, "harness", "planted.py"), "/planted"):
        try:
            with open(target, "w") as handle:
                handle.write("x")
            os.unlink(target)
            reached.append(f"wrote {target}")
        except OSError:
            pass
    neighbours = os.listdir(os.path.dirname(os.getcwd()))
    if len(neighbours) > 1:
        reached.append(f"other sandboxes' directories {neighbours}")
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
        reached.append("network")
    except OSError:
        pass
    if os.getppid() > 1:
        reached.append(f"a parent process {os.getppid()}")
    return reached


def custom_kernel(data: input_t) -> output_t:
    reached = _attempts()
    if reached:
        raise RuntimeError("reached: " + ", ".join(reached))
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
