"""The submission diff: the seeds reproduced byte for byte, and the edge cases of the format."""

from __future__ import annotations

import itertools
import os
import random
import resource
import subprocess
import time
from pathlib import Path

import myers
import pytest
import yaml
from conftest import HARNESS_SCRIPT

from harness.errors import HarnessError
from harness.report.diff import MAX_SEARCH_STEPS, DiffLine, diff_lines, myers_edit_script, render_diff

ROOT = Path(__file__).resolve().parent.parent
SEEDS_DIR = Path(__file__).resolve().parent / "data" / "seeds"
CANDIDATES_DIR = ROOT / "candidates"

SEED_LINEAGES = {
    "000_f2b8471f63303882.txt": "conv2d_a100_ultra",
    "001_b4a989dff272506b.txt": "conv2d_parallel_oh",
    "003_dc5811c4f721ff3c.txt": "conv2d_cudnn_wrap",
}


def _manifest_revisions(lineage: str) -> list[dict]:
    manifest = yaml.safe_load((CANDIDATES_DIR / "manifest.yml").read_text(encoding="utf-8"))
    (entry,) = [entry for entry in manifest["lineages"] if entry["name"] == lineage]
    return entry["revisions"]


def test_every_seed_copy_is_covered():
    assert sorted(path.name for path in SEEDS_DIR.glob("*.txt")) == sorted(SEED_LINEAGES)


@pytest.mark.parametrize("seed_name", sorted(SEED_LINEAGES))
def test_render_diff_reproduces_the_seed_byte_for_byte(seed_name: str):
    before, after = _manifest_revisions(SEED_LINEAGES[seed_name])
    seed = (SEEDS_DIR / seed_name).read_bytes()

    rendered = render_diff(
        (CANDIDATES_DIR / before["file"]).read_bytes(),
        (CANDIDATES_DIR / after["file"]).read_bytes(),
        after["id"],
    )

    assert rendered.encode("utf-8") == seed


def test_identical_files_give_one_marker_for_all_lines():
    content = b"import torch\n\ndef f():\n    return 1\n"  # five lines: the last one is empty
    assert render_diff(content, content, 5) == "submission 5\n\n  \u22ef 5 unchanged lines"


def test_first_revision_adds_every_line():
    content = b"a\n  b  \nc"
    expected = "submission 9\n\n+ a\n+   b  \n+ c"
    assert render_diff(None, content, 9) == expected
    assert render_diff(b"", content, 9) == expected


def test_empty_new_file_against_nothing_is_only_the_header():
    assert render_diff(None, b"", 1) == "submission 1"


def test_whitespace_is_trimmed_only_at_the_very_end():
    rendered = render_diff(b"keep\n", b"keep\nadded  \t\n  \n", 2)
    assert rendered == "submission 2\n\n  keep\n+ added  \t\n+"


def test_lost_final_newline_is_a_bare_removed_line():
    assert render_diff(b"x = 1\ny = 2\n", b"x = 1\ny = 2", 4) == "submission 4\n\n  x = 1\n  y = 2\n-"


def test_one_line_change_deep_in_a_long_file_collapses_both_sides():
    old_lines = [f"line {number}" for number in range(1, 101)]
    new_lines = list(old_lines)
    new_lines[49] = "line fifty"
    old = ("\n".join(old_lines) + "\n").encode()
    new = ("\n".join(new_lines) + "\n").encode()

    rendered = render_diff(old, new, 77)

    # 101 lines (the final newline gives an empty last one); line 50 changed
    assert rendered.split("\n") == [
        "submission 77",
        "",
        "  \u22ef 46 unchanged lines",
        "  line 47",
        "  line 48",
        "  line 49",
        "- line 50",
        "+ line fifty",
        "  line 51",
        "  line 52",
        "  line 53",
        "  \u22ef 48 unchanged lines",
    ]


def test_context_between_changes_is_shown_when_at_most_six_lines_and_collapsed_above():
    def numbered(count: int, changed: tuple[int, ...]) -> bytes:
        return "\n".join("X" if i in changed else f"{i}" for i in range(count)).encode()

    six_apart = render_diff(numbered(8, ()), numbered(8, (0, 7)), 1).split("\n")[2:]
    assert six_apart == ["- 0", "+ X", "  1", "  2", "  3", "  4", "  5", "  6", "- 7", "+ X"]

    seven_apart = render_diff(numbered(9, ()), numbered(9, (0, 8)), 1).split("\n")[2:]
    assert seven_apart == [
        "- 0",
        "+ X",
        "  1",
        "  2",
        "  3",
        "  \u22ef 1 unchanged line",
        "  5",
        "  6",
        "  7",
        "- 8",
        "+ X",
    ]


def test_crlf_line_endings_are_kept():
    rendered = render_diff(b"a\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\n", 3)
    assert rendered == "submission 3\n\n  a\r\n- b\r\n+ B\r\n  c"


def test_myers_edit_script_is_the_one_used():
    # Two shortest scripts exist; difflib keeps "c" (`+ a`, `  c`, `- a`), Myers' greedy
    # search removes first and keeps "a".
    rendered = render_diff(b"c\na", b"a\nc", 6)
    assert rendered.split("\n")[2:] == ["- c", "  a", "+ c"]


def test_edit_script_matches_the_myers_package_step_for_step():
    rng = random.Random(20240611)
    alphabet = ["a", "b", "c", "", " ", "a\r"]
    for _ in range(3000):
        old = [rng.choice(alphabet) for _ in range(rng.randint(0, 10))]
        new = [rng.choice(alphabet) for _ in range(rng.randint(0, 10))]
        assert myers_edit_script(old, new) == myers.diff(old, new), (old, new)


def test_diff_lines_numbers_lines_in_both_files():
    lines = diff_lines(b"one\ntwo\nthree", b"one\n2\nthree")
    assert lines == [
        DiffLine("context", "one", 1, 1),
        DiffLine("removed", "two", 2, None),
        DiffLine("added", "2", None, 2),
        DiffLine("context", "three", 3, 3),
    ]


def test_diff_lines_skipped_marker_counts_and_starts_at_the_first_hidden_line():
    old = "\n".join(str(i) for i in range(10)).encode()
    new = "\n".join(str(i) for i in range(9)).encode() + b"\nnine"
    lines = diff_lines(old, new)
    assert lines[0] == DiffLine("skipped", "", 1, 1, skipped=6)
    assert [line.kind for line in lines[1:]] == ["context", "context", "context", "removed", "added"]


def test_bytes_that_are_not_utf8_are_rejected():
    with pytest.raises(HarnessError, match="not UTF-8"):
        render_diff(b"ok\n", b"\xff\xfe broken", 1)


def _rewritten(lines: int, seed: int) -> bytes:
    """A file of `lines` assignments of random values: two of them differ on every line."""
    rng = random.Random(seed)
    return "".join(f"value_{i} = {rng.random():.12f}\n" for i in range(lines)).encode()


def test_every_lineage_diff_stays_far_below_the_search_bound():
    manifest = yaml.safe_load((CANDIDATES_DIR / "manifest.yml").read_text(encoding="utf-8"))
    for lineage in manifest["lineages"]:
        files = [(CANDIDATES_DIR / revision["file"]).read_bytes() for revision in lineage["revisions"]]
        for old, new in itertools.pairwise(files):
            old_lines, new_lines = (content.decode().split("\n") for content in (old, new))
            assert myers_edit_script(old_lines, new_lines, MAX_SEARCH_STEPS // 5) is not None, lineage["name"]


def test_a_diff_bomb_falls_back_within_the_bound_and_says_so():
    """Issue 15: 3,000 changed lines took 29 s and 1.7 GB; now the search stops at its bound and
    the diff shows every line between the common ends removed, then added."""
    old, new = _rewritten(3000, 1), _rewritten(3000, 2)
    started = time.perf_counter()
    rendered = render_diff(old, new, 4)
    assert time.perf_counter() - started < 10
    lines = rendered.split("\n")
    assert lines[2].startswith(
        "  \u22ef no shortest diff: the files differ too much to search within 1,000,000 steps"
    )
    assert [line[2:] for line in lines if line.startswith("- ")] == old.decode().split("\n")[:-1]
    assert [line[2:] for line in lines if line.startswith("+ ")] == new.decode().split("\n")[:-1]
    assert myers_edit_script(["a", "b"], ["a", "c"], max_steps=1) is None


@pytest.mark.parametrize("command", ["diff", "history"])
def test_diff_and_history_of_files_at_the_register_limit_are_bounded(tmp_path, command):
    """Two stored revisions of ~1 MB (the register limit) that differ on every line: `harness diff`
    and `harness history` finish within a minute and 1 GiB of address space."""
    from harness.store.revisions import register_revision
    from harness.store.session import open_store

    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = open_store(url)
    try:
        with store.session() as session:
            parent = register_revision(session, _rewritten(40_000, 1)[:990_000], "bomb.py", lineage="bomb")
            child = register_revision(session, _rewritten(40_000, 2)[:990_000], "bomb.py", lineage="bomb")
            child_id = child.revision.id
        assert child.revision.parent_id == parent.revision.id
    finally:
        store.close()
    limit = 1024**3

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    process = subprocess.run(
        [str(HARNESS_SCRIPT), command, *([str(child_id)] if command == "diff" else []), "--db", url],
        capture_output=True,
        env={**os.environ, "HARNESS_DB": url},
        preexec_fn=limited,
        timeout=120,
        check=False,
    )
    assert process.returncode == 0, process.stderr.decode()[-2000:]
    assert time.monotonic() - started < 60
    assert "\u22ef no shortest diff".encode() in process.stdout
