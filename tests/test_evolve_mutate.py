"""The built-in mutator: reproducible, valid values, exact bytes elsewhere, still a working kernel."""

import ast
import hashlib
import io
import os
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import pytest

from harness.config import CANDIDATES_DIR, PROJECT_ROOT
from harness.evolve.mutate import (
    MAX_BLOCK,
    MAX_DRAWS,
    STAGES,
    WARPS,
    find_config_lists,
    find_tunable_sites,
    mutate_candidate,
)
from harness.evolve.outcomes import ProposerFailed

ULTRA = (CANDIDATES_DIR / "conv2d_a100_ultra.py").read_bytes()
PARALLEL_OH = (CANDIDATES_DIR / "conv2d_parallel_oh.py").read_bytes()

LAUNCH_SITES = textwrap.dedent(
    """\
    import triton

    BLOCK_SIZE = 128
    NUM_WARPS: int = 4
    NUM_STAGES = 2
    DEBUG = 1
    SCALE = 3

    def run(x):
        kernel[(1,)](x, BLOCK_M=64, BLOCK_N=32, num_warps=NUM_WARPS, num_stages=3, other=7)
        configs = [triton.Config(dict(BLOCK_K=16), 2, 5)]
    """
).encode()


def number_tokens(source: bytes) -> list[tuple[tuple[int, int], str]]:
    tokens = tokenize.tokenize(io.BytesIO(source).readline)
    return [(token.start, token.string) for token in tokens if token.type == tokenize.NUMBER]


def test_sites_of_an_autotuned_seed():
    sites = find_tunable_sites(ULTRA)
    assert len(sites) == 7 * 4  # 7 configs x (BLOCK_H, BLOCK_W, num_warps, num_stages)
    assert [site.label for site in sites[:4]] == [
        "config 1 BLOCK_H",
        "config 1 BLOCK_W",
        "config 1 num_warps",
        "config 1 num_stages",
    ]
    assert all(ULTRA[site.start : site.end] == str(site.value).encode() for site in sites)


def test_sites_of_module_constants_and_launches():
    labels = {site.label: site.value for site in find_tunable_sites(LAUNCH_SITES)}
    assert labels == {
        "module constant BLOCK_SIZE": 128,
        "module constant NUM_WARPS": 4,
        "module constant NUM_STAGES": 2,
        "launch line 10 BLOCK_M": 64,
        "launch line 10 BLOCK_N": 32,
        "launch line 10 num_stages": 3,
        "config 1 BLOCK_K": 16,
        "config 1 num_warps": 2,
        "config 1 num_stages": 5,
    }


def test_same_seed_same_file_and_different_seeds_differ():
    first = mutate_candidate(ULTRA, 7)
    assert mutate_candidate(ULTRA, 7).content == first.content
    assert mutate_candidate(ULTRA, "7").content == mutate_candidate(ULTRA, "7").content
    others = {mutate_candidate(ULTRA, seed).content for seed in range(8)}
    assert len(others) == 8
    assert first.content != ULTRA


def test_only_the_changed_literals_change():
    for seed in range(20):
        mutation = mutate_candidate(ULTRA, seed, list_edits=0)
        changed_lines = {change.site.line for change in mutation.changes}
        old_lines, new_lines = ULTRA.split(b"\n"), mutation.content.split(b"\n")
        assert len(old_lines) == len(new_lines)
        for number, (old, new) in enumerate(zip(old_lines, new_lines), start=1):
            if number not in changed_lines:
                assert old == new
        old_numbers, new_numbers = number_tokens(ULTRA), number_tokens(mutation.content)
        differing = [(old, new) for old, new in zip(old_numbers, new_numbers) if old[1] != new[1]]
        assert len(differing) == len(mutation.changes) >= 1
        assert not mutation.content.endswith(b"\n")  # the seed's missing final newline stays missing
        assert mutation.summary.startswith("mutate: ") and "\n" not in mutation.summary
        ast.parse(mutation.content)


def test_values_stay_valid():
    for source in (ULTRA, PARALLEL_OH, LAUNCH_SITES):
        for seed in range(60):
            for change in mutate_candidate(source, seed, list_edits=0).changes:
                value = change.new_value
                assert value != change.site.value
                if change.site.kind == "num_warps":
                    assert value in WARPS
                elif change.site.kind == "num_stages":
                    assert value in STAGES
                else:
                    assert value & (value - 1) == 0 and 1 <= value <= MAX_BLOCK


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (b"import torch\n\ndef custom_kernel(data):\n    return data[0]\n", "nothing to mutate"),
        (b"BLOCK = 3\nDEBUG = 1\n", "nothing to mutate"),
        (b"def custom_kernel(data:\n", "does not parse"),
    ],
)
def test_nothing_to_mutate_fails_the_step(source, reason):
    with pytest.raises(ProposerFailed, match=reason):
        mutate_candidate(source, 1)


CHECK_EVERY_CONFIG = textwrap.dedent(
    """\
    import importlib.util, sys
    import torch
    from harness.tasks import load_reference, load_task

    reference = load_reference(load_task("conv2d_v2"))
    generate_input, ref_kernel = reference.generate_input, reference.ref_kernel

    spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    autotuner = module.conv2d_kernel_a100_ultra
    for config in list(autotuner.configs):
        autotuner.configs = [config]  # one config: the autotuner runs it without benchmarking
        autotuner.cache.clear()
        data = generate_input(size=12, kernelsize=4, channels=4, batch=2, seed=11, device="cpu")
        data[2].fill_(float("nan"))
        output = module.custom_kernel(data)
        torch.testing.assert_close(output, ref_kernel(data), rtol=1e-3, atol=1e-3)
    print("ok")
    """
)


def test_a_mutated_seed_still_computes_conv2d_under_the_triton_interpreter(tmp_path: Path):
    mutation = mutate_candidate(ULTRA, 0, list_edits=0)
    assert any(change.site.kind == "block" for change in mutation.changes), mutation.summary
    candidate = tmp_path / "candidate.py"
    candidate.write_bytes(mutation.content)
    result = subprocess.run(
        [sys.executable, "-c", CHECK_EVERY_CONFIG, str(candidate)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(PROJECT_ROOT)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ok" in result.stdout


def _configs(source: bytes) -> list[str]:
    """Each triton.Config call of the file's autotune lists, as a normalized syntax tree."""
    return [
        ast.dump(ast.parse(source[start:end], mode="eval"))
        for found in find_config_lists(source)
        for start, end in found.elements
    ]


def test_autotune_config_lists_get_configs_added_and_dropped():
    before = _configs(PARALLEL_OH)
    assert len(before) == 5
    seen = set()
    for seed in range(40):
        mutation = mutate_candidate(PARALLEL_OH, seed, list_edits=1.0)
        ast.parse(mutation.content)
        after = _configs(mutation.content)
        if "dropped" in mutation.summary:
            seen.add("dropped")
            assert len(after) == 4 and set(after) < set(before)
            assert len(mutation.content.split(b"\n")) == len(PARALLEL_OH.split(b"\n")) - 1  # its whole line
        elif "added" in mutation.summary:
            seen.add("added")
            assert len(after) == 6 and set(before) < set(after)  # a new config, none of the old ones lost
            assert len(set(after)) == 6  # never a copy of a config the list has
        else:
            seen.add("values")
    # with list_edits=1.0 every draw edits a list, unless the added copy equals a config the list
    # has: then values change instead
    assert {"dropped", "added"} <= seen


@pytest.mark.parametrize(
    "source",
    [
        b"import triton\nC = [triton.Config({'BLOCK': 16}, num_warps=4), triton.Config({'BLOCK': 32}, num_warps=4)]\n",
        b"import triton\nC = [\n    triton.Config({'BLOCK': 16}, num_warps=4),\n    triton.Config({'BLOCK': 32}, num_warps=4)\n]",
        b"import triton\nC = [triton.Config({'BLOCK': 16}, num_warps=4),  # first\n     triton.Config({'BLOCK': 32}, num_warps=4),\n]\n",
    ],
)
def test_list_edits_leave_a_valid_list_in_any_layout(source):
    for seed in range(30):
        mutation = mutate_candidate(source, seed, list_edits=1.0)
        tree = ast.parse(mutation.content)
        configs = tree.body[1].value.elts
        expected = 1 if "dropped" in mutation.summary else 3 if "added" in mutation.summary else 2
        assert len(configs) == expected, mutation.content
        assert all(isinstance(config, ast.Call) for config in configs)


def test_tile_constants_in_a_function_are_mutated():
    source = (CANDIDATES_DIR / "conv2d_parallel_oh_before.py").read_bytes()
    labels = [site.label for site in find_tunable_sites(source)]
    assert "tile constant BLOCK_M (line 161)" in labels and "tile constant BLOCK_N (line 162)" in labels


def test_never_bytes_the_lineage_has():
    first = mutate_candidate(PARALLEL_OH, 3)
    known = {hashlib.sha256(first.content).hexdigest()}
    again = mutate_candidate(PARALLEL_OH, 3, avoid=known)
    assert again.content != first.content and again.draws >= 2
    assert hashlib.sha256(again.content).hexdigest() not in known
    assert mutate_candidate(PARALLEL_OH, 3, avoid=known).content == again.content  # still reproducible
    # a file with a single two-valued site: every draw gives one of two files; both known: fail
    tiny = b"NUM_WARPS = 1\n"
    files = {mutate_candidate(tiny, seed).content for seed in range(20)}
    with pytest.raises(ProposerFailed, match=f"no new file in {MAX_DRAWS} draws"):
        mutate_candidate(tiny, 0, avoid={hashlib.sha256(content).hexdigest() for content in files})
