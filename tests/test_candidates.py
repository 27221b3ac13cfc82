"""Reading candidate files and what parsing finds in them: directives, entry points, flags."""

from __future__ import annotations

import textwrap

import pytest

from harness.candidates import FLAGS, parse_candidate, read_candidate_file, read_seeds
from harness.config import get_settings
from harness.errors import HarnessError

ENTRY = "def custom_kernel(data):\n    return data[2]\n"


def facts_of(source: str):
    return parse_candidate(textwrap.dedent(source).encode())


# --- reading files ---------------------------------------------------------------------------


def test_a_file_is_read_byte_for_byte(tmp_path):
    content = b"def custom_kernel(data):\r\n    return data[2]  \n\n   # no final newline"
    path = tmp_path / "k.py"
    path.write_bytes(content)
    assert read_candidate_file(path) == content


def test_a_file_of_exactly_the_size_limit_is_accepted(tmp_path):
    limit = get_settings().max_file_bytes
    path = tmp_path / "big.py"
    path.write_bytes(ENTRY.encode() + b"#" * (limit - len(ENTRY)))
    assert len(read_candidate_file(path)) == limit


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.py", b"", "is empty"),
        ("blank.py", b"  \n\t\n", "only whitespace"),
        (
            "binary.py",
            b"def custom_kernel(data):\n    pass\n\x00\x01\x02",
            r"binary \(it contains NUL bytes\)",
        ),
        (
            "latin1.py",
            "# caf\u00e9\n".encode("latin-1") + ENTRY.encode(),
            r"not UTF-8 text \(byte 0xe9 at offset 5\)",
        ),
        ("utf16.py", ENTRY.encode("utf-16"), "binary"),
    ],
)
def test_bad_content_is_rejected(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(HarnessError, match=message):
        read_candidate_file(path)


def test_a_file_over_the_size_limit_is_rejected(tmp_path):
    limit = get_settings().max_file_bytes
    path = tmp_path / "huge.py"
    path.write_bytes(ENTRY.encode() + b"#" * (limit + 1 - len(ENTRY)))
    with pytest.raises(HarnessError, match=f"over the limit of {limit} bytes"):
        read_candidate_file(path)


def test_a_missing_file_and_a_directory_are_rejected(tmp_path):
    with pytest.raises(HarnessError, match="no such file"):
        read_candidate_file(tmp_path / "missing.py")
    with pytest.raises(HarnessError, match="is a directory"):
        read_candidate_file(tmp_path)


# --- directives ------------------------------------------------------------------------------


def test_directives_come_from_the_leading_comment_block():
    facts = facts_of(
        """\
        #!/usr/bin/env python
        #!POPCORN leaderboard conv2d_v2

        # a plain comment
        #!POPCORN gpu B200
        import torch
        #!POPCORN gpu H100
        """
        + ENTRY
    )
    assert facts.directives == {"leaderboard": "conv2d_v2", "gpu": "B200"}


def test_slash_directives_are_read_too():
    facts = facts_of("//!POPCORN leaderboard conv2d_v2\n//!POPCORN gpu A100\n" + ENTRY)
    assert facts.directives == {"leaderboard": "conv2d_v2", "gpu": "A100"}


def test_a_directive_after_the_leading_block_is_ignored():
    facts = facts_of('"""A docstring ends the comment block."""\n#!POPCORN leaderboard other_task\n' + ENTRY)
    assert facts.directives == {}


# --- entry points ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "entry_point"),
    [
        (ENTRY, "custom_kernel"),
        ("def kernel_function(input, weight, output=None):\n    return output\n", "kernel_function"),
        ("def _impl(data):\n    return data[2]\n\ncustom_kernel = _impl\n", "custom_kernel"),
        ("from my_impl import kernel_function\n", "kernel_function"),
        (
            "try:\n    import fast\nexcept ImportError:\n    fast = None\nif fast:\n    custom_kernel = fast.k\n",
            "custom_kernel",
        ),
        ("def kernel_function(i, w, o=None):\n    pass\n" + ENTRY, "custom_kernel"),
    ],
)
def test_the_entry_point_is_found(source, entry_point):
    facts = facts_of(source)
    assert facts.entry_point == entry_point
    assert "no_entry_point" not in facts.flags


@pytest.mark.parametrize(
    "source",
    [
        "def conv(data):\n    return data[2]\n",
        "def outer():\n    def custom_kernel(data):\n        pass\n",
        "class Holder:\n    def kernel_function(self, i, w):\n        pass\n",
        "result = custom_kernel(data)\n",
    ],
)
def test_no_entry_point_is_flagged(source):
    facts = facts_of(source)
    assert facts.entry_point is None
    assert facts.flags == ["no_entry_point"]


def test_a_syntax_error_is_flagged_with_its_message_and_the_entry_point_still_found():
    facts = facts_of("import torch\n\ndef custom_kernel(data:\n    return data\n")
    assert facts.flags == ["syntax_error"]
    assert facts.syntax_error.startswith("line 3:")
    assert facts.entry_point == "custom_kernel"
    nothing = facts_of("for in range:\n")
    assert nothing.flags == ["syntax_error", "no_entry_point"] and nothing.entry_point is None


# --- static flags ----------------------------------------------------------------------------

FLAGGED = [
    ("cuda_streams", "import torch\ns = torch.cuda.Stream()\n"),
    ("cuda_streams", "import torch\nwith torch.cuda.stream(torch.cuda.Stream()):\n    pass\n"),
    ("cuda_streams", "from torch.cuda import Stream\n"),
    (
        "cuda_streams",
        'src = "#include <cuda_runtime.h>\\nvoid f(){ cudaStream_t s; cudaStreamCreate(&s); }"\n',
    ),
    ("library_delegation", "import torch.nn.functional as F\ny = F.conv2d(x, w)\n"),
    ("library_delegation", "from torch.nn.functional import conv2d as c\ny = c(x, w)\n"),
    ("library_delegation", "import torch\ny = torch.conv2d(x, w)\n"),
    ("library_delegation", "y = F.conv2d(x, w)\n"),
    ("library_delegation", "import torch\ntorch.backends.cudnn.benchmark = True\n"),
    ("library_delegation", "import torch\ny = torch.ops.aten.convolution(x, w)\n"),
    ("library_delegation", 'cpp = "#include <torch/extension.h>\\nauto y = at::conv2d(x, w);"\n'),
    ("library_delegation", 'cpp = "#include <cudnn.h>\\ncudnnConvolutionForward(h);"\n'),
    ("tf32_switch", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"),
    ("tf32_switch", "import torch\ntorch.set_float32_matmul_precision('high')\n"),
    ("tf32_switch", "import triton.language as tl\nacc = tl.dot(a, b, input_precision='ieee')\n"),
    ("tf32_switch", "import os\nos.environ['NVIDIA_TF32_OVERRIDE'] = '0'\n"),
    ("inline_extension", "from torch.utils.cpp_extension import load_inline\nm = load_inline('m', '')\n"),
    ("inline_extension", "import torch.utils.cpp_extension as ext\nm = ext.load('m', ['m.cu'])\n"),
    ("inline_extension", "import ctypes\nlib = ctypes.CDLL('libk.so')\n"),
    ("inline_extension", "import cupy as cp\nk = cp.RawKernel('extern \"C\" __global__ void k(){}', 'k')\n"),
    ("threads", "import threading\nt = threading.Thread(target=print)\n"),
    ("threads", "from concurrent.futures import ThreadPoolExecutor\n"),
    ("threads", "import multiprocessing as mp\np = mp.Pool(2)\n"),
    ("monkeypatching", "import torch\ntorch.cuda.Event = object\n"),
    ("monkeypatching", "import time\ntime.perf_counter = lambda: 0.0\n"),
    ("monkeypatching", "import time as t\nt.perf_counter = lambda: 0.0\n"),
    ("monkeypatching", "from torch import cuda\ncuda.synchronize = lambda: None\n"),
    ("monkeypatching", "import torch\nsetattr(torch.cuda, 'Event', object)\n"),
    ("monkeypatching", "import triton\ntriton.testing.do_bench = lambda f: 0.0\n"),
    ("monkeypatching", "import builtins\nbuiltins.print = lambda *a: None\n"),
    ("monkeypatching", "import torch\nvars(torch.cuda)['Event'] = object\n"),
    ("monkeypatching", "import sys\nsys.modules['time'] = fake\n"),
    ("monkeypatching", "from unittest import mock\nmock.patch('time.perf_counter', lambda: 0).start()\n"),
]


@pytest.mark.parametrize(("flag", "source"), FLAGGED)
def test_each_static_flag_is_found(flag, source):
    assert parse_candidate((source + ENTRY).encode()).flags == [flag]


NOT_FLAGGED = [
    "import torch\nstream = torch.cuda.current_stream()\n",
    '"""Unlike cuDNN or F.conv2d, this kernel computes the convolution itself."""\n',
    "from time import perf_counter\nperf_counter = None\n",
    "import torch\nt = torch.empty(3)\nt.data = torch.zeros(3)\n",
    "import torch\ny = torch.matmul(a, b)\n",
    "import torch\ntorch.backends.cudnn_like = None\n",
]


@pytest.mark.parametrize("source", NOT_FLAGGED)
def test_look_alikes_are_not_flagged(source):
    assert parse_candidate((source + ENTRY).encode()).flags == []


def test_settings_namespaces_are_configuration_not_monkeypatching():
    facts = facts_of("import torch\ntorch.backends.cudnn.allow_tf32 = False\n" + ENTRY)
    assert facts.flags == ["library_delegation", "tf32_switch"]


def test_flags_come_in_a_fixed_order():
    source = "import threading\nimport torch\ntorch.cuda.Event = None\ns = torch.cuda.Stream()\n" + ENTRY
    facts = facts_of(source)
    assert facts.flags == ["cuda_streams", "threads", "monkeypatching"]
    assert [flag for flag in FLAGS if flag in facts.flags] == facts.flags


# --- seed manifests --------------------------------------------------------------------------


def test_seeds_are_read_in_order_with_their_files(tmp_path):
    (tmp_path / "a_before.py").write_text(ENTRY)
    (tmp_path / "a.py").write_text(ENTRY + "# faster\n")
    (tmp_path / "manifest.yml").write_text(
        "lineages:\n  - name: a\n    author: me\n    revisions:\n"
        "      - file: a_before.py\n      - file: a.py\n        id: 42\n        message: faster\n"
    )
    seeds = read_seeds(tmp_path / "manifest.yml")
    assert [(s.lineage, s.filename, s.submission_id, s.follows_previous) for s in seeds] == [
        ("a", "a_before.py", None, False),
        ("a", "a.py", 42, True),
    ]
    assert seeds[1].content == (ENTRY + "# faster\n").encode() and seeds[1].author == "me"


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("lineages:\n  - name: a\n    revisions:\n      - file: missing.py\n", "no such file"),
        ("lineages:\n  - name: a\n    revisions:\n      - file: k.py\n        idd: 3\n", "idd"),
        ("lineages:\n  - name: a\n    revisions: []\n", "revisions"),
        ("lineages: [\n", "not valid YAML"),
    ],
)
def test_a_bad_manifest_is_rejected(tmp_path, manifest, message):
    (tmp_path / "k.py").write_text(ENTRY)
    (tmp_path / "manifest.yml").write_text(manifest)
    with pytest.raises(HarnessError, match=message):
        read_seeds(tmp_path / "manifest.yml")
