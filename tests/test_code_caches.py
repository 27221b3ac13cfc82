"""A revision's per-code caches seeded from its parent's (issue 31: kernels, extensions and
graphs a child shares byte for byte with its parent are not compiled again), through the command
line and real sandboxed children on the CPU. The caches' own keys decide what is reused; these
tests look at what the child finds in its caches when it starts, and at what is never copied."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import rows

# The parent leaves files in its Inductor cache (standing for compiled graphs), a link to a file
# it cannot read there (a link, not followed by the parent's copy) and a subfolder; the child
# fails at import unless its own cache holds the same, and never the link.
PARENT = """import os
from pathlib import Path

import torch.nn.functional as F

cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
(cache / "graphs").mkdir(exist_ok=True)
(cache / "graphs" / "compiled.bin").write_bytes(b"kernel bytes")
if not (cache / "elsewhere").is_symlink():
    (cache / "elsewhere").symlink_to({secret!r})


def custom_kernel(data):
    x, w, out = data
    out.copy_(F.conv2d(x, w))
    return out
"""
CHILD = """import os
from pathlib import Path

import torch.nn.functional as F

cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
# (the child runs under python -O: no assert statements)
if not (cache / "graphs" / "compiled.bin").is_file():
    raise ImportError("not seeded")
if (cache / "graphs" / "compiled.bin").read_bytes() != b"kernel bytes":
    raise ImportError("seeded with other bytes")
if os.path.lexists(cache / "elsewhere"):
    raise ImportError("the parent's link was copied")


def custom_kernel(data):
    x, w, out = data
    out.copy_(F.conv2d(x, w))  # the child
    return out
"""


def registered(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[2].rstrip(":")


def test_a_childs_caches_start_as_its_parents_without_links(harness, store_url, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not for candidates")
    parent_file, child_file = tmp_path / "cached.py", tmp_path / "cached_child.py"
    parent_file.write_text(PARENT.format(secret=str(secret)))
    child_file.write_text(CHILD)
    parent = registered(harness("register", parent_file))
    first = harness("test", parent, "--device", "cpu", timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    child = registered(harness("register", child_file, "--parent", parent))
    result = harness("test", child, "--device", "cpu", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert rows(store_url, "SELECT status FROM runs WHERE revision_id = ?", int(child)) == [("pass",)]

    # a revision registered without a parent starts with empty caches (its code's own: another
    # file than the child's, whose caches are now seeded): it fails
    alone_file = tmp_path / "alone.py"
    alone_file.write_text(CHILD + "# alone\n")
    alone = registered(harness("register", alone_file))
    failed = harness("test", alone, "--device", "cpu", timeout=300)
    assert failed.returncode in (0, 1), failed.stderr
    ((status, reason),) = rows(store_url, "SELECT status, reason FROM runs WHERE revision_id = ?", int(alone))
    assert status == "compile_error" and "not seeded" in reason


def test_seeding_copies_regular_files_only_and_never_over_a_childs_own(tmp_path: Path, monkeypatch):
    from harness.sandbox.workspace import code_cache_dirs, seed_code_caches

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    triton, _extensions, inductor = code_cache_dirs("p" * 64)
    (triton / "deep" / "er").mkdir(parents=True)
    (triton / "deep" / "er" / "kernel.cubin").write_bytes(b"x" * 1000)
    (triton / "link").symlink_to(tmp_path)
    os.mkfifo(triton / "fifo")
    (triton / "once").write_bytes(b"y")
    os.link(triton / "once", triton / "twice")  # a file with two links: neither copied
    inductor.mkdir(parents=True)
    (inductor / "graph").write_bytes(b"g")
    own = code_cache_dirs("c" * 64)[2]
    own.mkdir(parents=True)
    (own / "mine").write_bytes(b"m")
    assert seed_code_caches("c" * 64, "p" * 64) == 1000
    child_triton, _, child_inductor = code_cache_dirs("c" * 64)
    assert (child_triton / "deep" / "er" / "kernel.cubin").read_bytes() == b"x" * 1000
    assert sorted(p.name for p in child_triton.iterdir()) == ["deep"]  # no link, FIFO or linked file
    assert sorted(p.name for p in child_inductor.iterdir()) == ["mine"]  # its own kept as it was
    assert seed_code_caches("d" * 64, "p" * 64, max_bytes=500) == 0  # over the bound: nothing
    assert not code_cache_dirs("d" * 64)[0].exists()
