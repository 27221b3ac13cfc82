"""Applying a proposer's reply to the parent: whole files, SEARCH/REPLACE blocks, loud failures."""

import pytest

from harness.evolve.edits import apply_reply
from harness.evolve.outcomes import EditFailed

PARENT = "import torch\n\nBLOCK = 64\n\ndef f(x):\n    y = x + 1\n    return y\n\ndef g(x):\n    y = x + 1\n    return y * 2"


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n"


def test_whole_file_replaces_the_parent():
    reply = "Here it is:\n\n```python\nimport torch\n\nBLOCK = 128\n```\nThat is all.\n"
    applied = apply_reply(PARENT, reply)
    assert applied.form == "whole_file"
    assert applied.content == "import torch\n\nBLOCK = 128\n"


def test_whole_file_with_a_longer_fence_keeps_inner_backticks():
    code = 'DOC = """\n```python\nx\n```\n"""\n'
    applied = apply_reply(PARENT, f"````python\n{code}````\n")
    assert applied.content == code


def test_several_blocks_apply_in_order_and_keep_every_other_byte():
    reply = (
        "Two changes.\n"
        + block("BLOCK = 64", "BLOCK = 128")
        + "\n"
        + block("def g(x):\n    y = x + 1", "def g(x):\n    y = x + 2")
    )
    applied = apply_reply(PARENT, reply)
    assert applied.form == "search_replace" and applied.blocks == 2
    assert applied.content == PARENT.replace("BLOCK = 64", "BLOCK = 128").replace(
        "def g(x):\n    y = x + 1", "def g(x):\n    y = x + 2"
    )
    assert not applied.content.endswith("\n")  # the parent's missing final newline stays missing


def test_blocks_inside_fences_are_read_as_blocks():
    reply = "```python\n" + block("BLOCK = 64", "BLOCK = 32") + "```\n"
    assert apply_reply(PARENT, reply).content == PARENT.replace("BLOCK = 64", "BLOCK = 32")


def test_a_block_that_deletes_lines():
    applied = apply_reply(PARENT, block("BLOCK = 64\n", ""))
    assert "BLOCK" not in applied.content
    assert applied.content.startswith("import torch\n\n\ndef f(x):")


def test_a_block_matching_zero_times_fails_and_names_the_block():
    reply = block("BLOCK = 64", "BLOCK = 128") + block("BLOCK = 256", "BLOCK = 512")
    with pytest.raises(EditFailed) as failure:
        apply_reply(PARENT, reply)
    reason = str(failure.value)
    assert "block 2 of 2" in reason and "0 times" in reason and "BLOCK = 256" in reason


def test_a_block_matching_twice_fails_with_the_lines():
    with pytest.raises(EditFailed) as failure:
        apply_reply(PARENT, block("    y = x + 1", "    y = x - 1"))
    reason = str(failure.value)
    assert "block 1 of 1" in reason and "2 times" in reason and "lines 6, 10" in reason


def test_a_block_that_only_matches_with_other_indentation_says_so():
    with pytest.raises(EditFailed, match=r"0 times \(1 times when leading and trailing whitespace"):
        apply_reply(PARENT, block("  BLOCK = 64", "BLOCK = 8"))


def test_a_later_block_sees_the_earlier_edit():
    reply = block("BLOCK = 64", "BLOCK = 128") + block("BLOCK = 64", "BLOCK = 32")
    with pytest.raises(EditFailed, match="block 2 of 2.*0 times"):
        apply_reply(PARENT, reply)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("<<<<<<< SEARCH\nBLOCK = 64\n>>>>>>> REPLACE\n", "comes before its '======='"),
        ("<<<<<<< SEARCH\nBLOCK = 64\n=======\nBLOCK = 8\n", "has no '>>>>>>> REPLACE' line"),
        ("<<<<<<< SEARCH\n=======\nBLOCK = 8\n>>>>>>> REPLACE\n", "empty SEARCH section"),
        ("BLOCK = 8\n>>>>>>> REPLACE\n", "without a '<<<<<<< SEARCH'"),
    ],
)
def test_malformed_blocks_fail(reply, reason):
    with pytest.raises(EditFailed, match=reason):
        apply_reply(PARENT, reply)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("The kernel looks fine to me.", "neither SEARCH/REPLACE blocks nor a fenced"),
        ("```bash\nls\n```\n", "neither SEARCH/REPLACE blocks nor a fenced"),
        ("```python\nx = 1\n```\n```python\ny = 2\n```\n", "2 fenced Python blocks"),
        ("```python\nx = 1\n", "never closed"),
        ("```python\n\n```\n", "is empty"),
    ],
)
def test_replies_without_a_usable_edit_fail(reply, reason):
    with pytest.raises(EditFailed, match=reason):
        apply_reply(PARENT, reply)


def test_crlf_replies_match_lf_parents():
    reply = block("BLOCK = 64", "BLOCK = 16").replace("\n", "\r\n")
    assert apply_reply(PARENT, reply).content == PARENT.replace("BLOCK = 64", "BLOCK = 16")


def test_search_lines_match_whole_lines_only():
    # "    return y" is the whole of line 7 but only the start of line 11 ("    return y * 2")
    applied = apply_reply(PARENT, block("    return y", "    return -y"))
    assert applied.content.split("\n")[6] == "    return -y"
    assert applied.content.endswith("    return y * 2")
