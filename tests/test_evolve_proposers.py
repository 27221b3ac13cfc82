"""Proposers: an external command through a real subprocess (tests/proposers/reply.py), the
HARNESS-META convention, time limits that kill the whole process group, and builtin:mutate."""

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from harness.config import CANDIDATES_DIR
from harness.errors import HarnessError
from harness.evolve.edits import apply_reply
from harness.evolve.outcomes import EditFailed, ProposerFailed, ProposerTimeout
from harness.evolve.proposers import (
    BUILTIN_MUTATE,
    CommandProposer,
    MutateProposer,
    ProposalRequest,
    make_proposer,
    split_meta,
)

REPLY_SCRIPT = Path(__file__).parent / "proposers" / "reply.py"
PARENT = (CANDIDATES_DIR / "conv2d_a100_ultra.py").read_bytes()
PROMPT = (
    "You are a kernel engineer.\n\n# The revision to improve: submission 1\n\n```python\n"
    + PARENT.decode()
    + "\n```\n\nReply with SEARCH/REPLACE blocks or a whole file.\n"
)


def command(mode: str, *args: str) -> str:
    return shlex.join([sys.executable, str(REPLY_SCRIPT), mode, *args])


def propose(mode: str, *args: str, timeout_s: float = 60):
    proposer = make_proposer(command(mode, *args), timeout_s)
    return proposer.propose(ProposalRequest(prompt=PROMPT, parent_code=PARENT, seed="1:1"))


def test_whole_file_reply_with_metadata_on_stdout():
    proposal = propose("whole-file")
    assert (proposal.summary, proposal.tokens, proposal.cost) == ("append a comment line", 1234, 0.01)
    assert proposal.meta == {"model": "test"}
    assert "HARNESS-META" not in proposal.reply
    child = apply_reply(PARENT.decode(), proposal.reply).content
    assert child == PARENT.decode() + "\n# whole file from the test proposer\n"


def test_search_replace_reply_with_metadata_on_stderr():
    proposal = propose("search-replace")
    assert proposal.summary == "mark the line 'import torch'" and proposal.tokens == 1234
    applied = apply_reply(PARENT.decode(), proposal.reply)
    assert applied.form == "search_replace"
    assert applied.content == PARENT.decode().replace(
        "import torch\n", "import torch  # touched by the test proposer\n", 1
    )


def test_a_block_that_does_not_match_fails_the_edit_loudly():
    proposal = propose("no-match")
    with pytest.raises(EditFailed, match="block 2 of 2.*0 times"):
        apply_reply(PARENT.decode(), proposal.reply)


def test_garbage_reply_fails_the_edit():
    proposal = propose("garbage")
    with pytest.raises(EditFailed, match="neither SEARCH/REPLACE blocks nor a fenced"):
        apply_reply(PARENT.decode(), proposal.reply)


def test_a_hanging_proposer_is_killed_with_its_children(tmp_path: Path, process_gone):
    pidfile = tmp_path / "sleeper.pid"
    started = time.monotonic()
    with pytest.raises(ProposerTimeout, match="within 2 s"):
        propose("hang", str(pidfile), timeout_s=2)
    assert time.monotonic() - started < 15
    sleeper = int(pidfile.read_text())
    assert process_gone(sleeper), "the proposer's own child survived the time limit"


def test_a_failing_proposer_reports_its_exit_status_and_last_words():
    with pytest.raises(ProposerFailed, match="exited with status 3: the model is overloaded"):
        propose("fail")


def test_a_malformed_meta_line_fails_the_step_and_keeps_the_reply():
    with pytest.raises(ProposerFailed, match="HARNESS-META line is not valid") as failure:
        propose("bad-meta")
    assert failure.value.reply == "```python\nprint('x')\n```\nHARNESS-META {not json\n"


def test_meta_convention():
    reply, meta = split_meta('text\nHARNESS-META {"summary": "s", "tokens": 5}\n\n', "")
    assert reply == "text\n" and (meta.summary, meta.tokens, meta.cost) == ("s", 5, None)
    _, meta = split_meta("text\n", 'log\nHARNESS-META {"cost": 1.5}\nHARNESS-META {"cost": 2}\n')
    assert meta.cost == 2
    reply, meta = split_meta("text\n", "")
    assert reply == "text\n" and meta.summary == "" and meta.tokens is None
    with pytest.raises(ProposerFailed, match="tokens"):
        split_meta('HARNESS-META {"tokens": "many"}', "")
    with pytest.raises(ProposerFailed, match="cost"):
        split_meta('HARNESS-META {"cost": -1}', "")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("builtin:llm", "unknown built-in proposer 'builtin:llm'"),
        ("", "the proposer command is empty"),
        ("no-such-program-xyz --flag", "proposer command not found: 'no-such-program-xyz'"),
        ("python 'unclosed", "cannot split the proposer command"),
    ],
)
def test_bad_proposer_specs_are_harness_errors(spec, message):
    with pytest.raises(HarnessError, match=message):
        make_proposer(spec)


def test_builtin_mutate_is_reproducible_and_lists_its_changes():
    proposer = make_proposer(BUILTIN_MUTATE)
    assert isinstance(proposer, MutateProposer) and proposer.name == "builtin:mutate"
    request = ProposalRequest(prompt=PROMPT, parent_code=PARENT, seed="5:2")
    first, second = proposer.propose(request), proposer.propose(request)
    assert first.content == second.content != PARENT
    assert first.summary.startswith("mutate: config ")
    assert first.reply.startswith("builtin:mutate (seed '5:2') made ")
    assert first.tokens is None and first.cost is None


def test_external_proposer_reads_the_prompt_on_stdin(tmp_path: Path):
    script = tmp_path / "echo_length.py"
    script.write_text("import sys\nprompt = sys.stdin.read()\nprint(f'{len(prompt)} characters')\n")
    proposer = CommandProposer(shlex.join([sys.executable, str(script)]))
    proposal = proposer.propose(ProposalRequest(prompt="é" * 100_000, parent_code=b"", seed="0"))
    assert proposal.reply == "100000 characters\n"
    assert proposer.name.endswith("echo_length.py") and os.path.basename(sys.executable) in proposer.name
