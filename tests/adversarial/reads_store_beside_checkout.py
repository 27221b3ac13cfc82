"""Looks for a SQLite store in every folder above the paths it imports from (issue 33, item 6: a
store at ~/projects/store.sqlite beside the checkout ~/projects/harness was read, the leaderboard
secret and other authors' code put into the candidate's error). Its call fails (runtime_error)
naming each store file it could read; it passes when it read none."""

import os
import sys
from pathlib import Path

import torch.nn.functional as F
from task import input_t, output_t

folders = set()
for entry in sys.path:
    if entry:
        folders.update(Path(entry).absolute().parents)
read = []
for folder in sorted(folders):
    try:
        names = os.listdir(folder)
    except OSError:
        continue
    for name in names:
        if ".sqlite" in name or name.endswith((".db", "-wal", "-journal")):
            try:
                with open(folder / name, "rb") as store:
                    head = store.read(16)
            except OSError:
                continue
            if head:
                read.append(f"{folder / name}: {head[:15]!r}")


def custom_kernel(data: input_t) -> output_t:
    if read:
        raise RuntimeError("read " + "; ".join(read))
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
