"""Issue 33 item 7: text from a candidate and its registration is shown as text. A hostile
candidate (tests/adversarial/shows_terminal_escapes.py, with escapes added here to its POPCORN
directives, a code line that a CR hides, a bidi comment and its file name), registered with a
hostile `--author` and `-m`, checked by `harness test` on the CPU, timed beside an honest
revision that carries the same author, and handed to a proposer that replies with escapes; then
every command that shows it, through a pipe and on a terminal (a pty): no control character of
theirs reaches the output raw, and each is shown as its escape (harness.report.text)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from conftest import HARNESS_SCRIPT, on_a_terminal

from harness.report.diff import render_diff
from harness.report.text import escape_controls, escape_template_value

ADVERSARIAL = Path(__file__).parent / "adversarial" / "shows_terminal_escapes.py"
ESC, BEL = "\x1b", "\x07"
CLIPBOARD = f"{ESC}]52;c;ZWNobyBwd25lZAo={BEL}"  # OSC 52: "echo pwned" into the clipboard
DIRECTIVES = (
    f"#!POPCORN lang py{ESC}[2J{ESC}]0;directive-title{BEL}\n#!POPCORN {ESC}[31mkey\u202e value{CLIPBOARD}\n"
)
HIDDEN_LINE = "hidden = 1\r# a harmless comment that hides the line before it\n"  # Python sees two lines
TROJAN = "# \u202e } \u2066 trojan source \u2069\n"
FILE_NAME = f"evil{ESC}]0;file-title{BEL}{ESC}[2J\u202e.py"
AUTHOR = f"mallory{CLIPBOARD}"
MESSAGE = f"fine\rrm -rf ~ \b\b{ESC}[2J\x9b31m"
HONEST = """import torch.nn.functional as F


def custom_kernel(data):
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
"""
REPLY = f"I rewrote it{ESC}[2J{ESC}]0;reply-title{BEL} \u202eevil\u202c done\rOVER"
SUMMARY = f"summary{CLIPBOARD}"
PROPOSER_STDERR = f"stderr{ESC}[2J\x9b31m"
PROPOSER = (  # replies with no edit: the step fails, and its reply and stderr are kept
    "import json, sys\n"
    "sys.stdin.read()\n"
    f"print({REPLY!r})\n"
    f'print("HARNESS-META " + json.dumps({{"summary": {SUMMARY!r}, "tokens": 1, "cost": 0.0}}))\n'
    f"print({PROPOSER_STDERR!r}, file=sys.stderr)\n"
)

# What the reports must show, escaped.
REASON_SHOWN = r"RuntimeError: \x1b[2J\x1b[H\x1b[1;32mrank 1"
CODE_SHOWN = r"hidden = 1\r# a harmless comment"
AUTHOR_SHOWN = r"mallory\x1b]52;c;ZWNobyBwd25lZAo=\x07"
FILE_SHOWN = r"evil\x1b]0;file-title\x07\x1b[2J\u202e.py"
MESSAGE_SHOWN = r"fine\rrm -rf ~ \x08\x08\x1b[2J\x9b31m"
DIRECTIVE_SHOWN = r"lang=py\x1b[2J\x1b]0;directive-title\x07"
BIDI_SHOWN = r"# \u202e } \u2066 trojan source \u2069"
HARNESS_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # the harness's own styles on a terminal


def raw_controls(text: str) -> list[str]:
    """The control, format and separator characters in `text` other than newline and tab."""
    return sorted(
        {
            repr(character)
            for character in text
            if character not in "\n\t" and unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp", "Cs")
        }
    )


def assert_no_raw_controls(text: str, where: str) -> None:
    assert not raw_controls(text), f"{where} prints raw {raw_controls(text)}:\n{text[:3000]}"


def harness(
    db: str, *args: object, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HARNESS_SCRIPT), *(str(arg) for arg in args)],
        capture_output=True,
        text=True,
        env={**os.environ, "HARNESS_DB": db, **(env or {})},
        timeout=timeout,
        check=False,
    )


def terminal_text(db: str, *args: str, env: dict[str, str] | None = None) -> str:
    """What a command writes to a terminal (a pty for stdin and stdout; stderr piped and
    appended), with the pty's CR before each newline taken out."""
    shown = on_a_terminal(
        list(args), {"HARNESS_DB": db, "COLUMNS": "200", "LINES": "40", **(env or {})}, code=None
    )
    return shown.output.replace("\r\n", "\n") + shown.stderr


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The store after registration, `harness test`, a CPU tournament and a one-step experiment;
    with each command's output (stdout and stderr) by name."""
    folder = tmp_path_factory.mktemp("control_characters")
    db = f"sqlite:///{folder / 'store.sqlite'}"
    candidate = folder / FILE_NAME
    candidate.write_text(DIRECTIVES + ADVERSARIAL.read_text() + HIDDEN_LINE + TROJAN, encoding="utf-8")
    honest = folder / "honest.py"
    honest.write_text(DIRECTIVES + HONEST + TROJAN, encoding="utf-8")
    (folder / "proposer.py").write_text(PROPOSER, encoding="utf-8")
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    outputs["register"] = harness(
        db, "register", candidate, "--lineage", "hostile", "--author", AUTHOR, "-m", MESSAGE
    )
    assert outputs["register"].returncode == 0, outputs["register"].stderr
    outputs["register honest"] = harness(db, "register", honest, "--author", AUTHOR, "-m", MESSAGE)
    assert outputs["register honest"].returncode == 0, outputs["register honest"].stderr
    outputs["register missing"] = harness(db, "register", folder / f"gone{ESC}[2J.py")
    outputs["test"] = harness(db, "test", "1", "--device", "cpu")
    outputs["test json"] = harness(db, "test", "1", "--device", "cpu", "--format", "json")
    outputs["tournament"] = harness(db, "tournament", "--device", "cpu", "--budget", "0.05")
    proposer = f"{sys.executable} {folder / 'proposer.py'}"
    outputs["evolve"] = harness(
        db, "evolve", "--from", "1", "--generations", "1", "--proposer", proposer, "--device", "cpu"
    )
    return {"db": db, "folder": folder, "outputs": outputs}


def test_the_escape_is_visible_reversible_and_leaves_ordinary_text_alone():
    assert escape_controls(f"a{ESC}[2J\r\b\x9b\u202e\U000e0041\t\n") == (
        r"a\x1b[2J\r\x08\x9b\u202e\U000e0041\t\n"
    )
    assert escape_controls("x\r\ny\rz\t\n", block=True) == "x\r\ny\\rz\t\n"  # a CRLF line end stays
    ordinary = "def f(x):\n\treturn x * 2  # π, ±, 'é', \"\\n\" ⋯\n"
    assert escape_controls(ordinary, block=True) == ordinary
    hostile = f"{ESC}]0;t{BEL}\r\b\u2066\u2028"
    assert escape_controls(escape_controls(hostile)) == escape_controls(hostile)
    assert escape_template_value(3) == 3 and escape_template_value(None) is None


def test_every_control_and_format_character_of_this_python_is_escaped():
    """The hard-coded ranges cover Cc, Cf, Zl, Zp and Cs of the running Python's Unicode."""
    missed = [
        hex(code)
        for code in range(0x110000)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zl", "Zp", "Cs")
        and escape_controls(chr(code)) == chr(code)
    ]
    assert not missed


def test_the_seeds_diff_format_is_unchanged_for_ordinary_text():
    assert (
        render_diff(b"keep\n", b"keep\nadded  \t\nend\n", 2) == "submission 2\n\n  keep\n+ added  \t\n+ end"
    )
    assert render_diff(b"a\r\nb\r\n", b"a\r\nB\r\n", 3) == "submission 3\n\n  a\r\n- b\r\n+ B"
    hostile = render_diff(b"x\n", f"x\ny = 1\r# comment {ESC}[2J\n".encode(), 4)
    assert hostile == "submission 4\n\n  x\n+ y = 1\\r# comment \\x1b[2J"


def test_registration_test_tournament_and_evolve_print_no_raw_control(hostile):
    outputs = hostile["outputs"]
    for name, done in outputs.items():
        assert_no_raw_controls(done.stdout + done.stderr, name)
    assert outputs["register missing"].returncode == 2
    assert r"gone\x1b[2J.py" in outputs["register missing"].stderr
    assert outputs["test"].returncode == 1, outputs["test"].stderr
    assert REASON_SHOWN in outputs["test"].stdout
    assert "runtime_error" in outputs["tournament"].stdout, outputs["tournament"].stderr
    # its one generation failed: a failed experiment exits 1 (issue 30, item 9); its story printed
    assert outputs["evolve"].returncode == 1, outputs["evolve"].stderr
    assert "experiment 1: failed" in outputs["evolve"].stdout, outputs["evolve"].stdout
    # JSON escapes control characters itself, and keeps the text as it is
    reports = json.loads(outputs["test json"].stdout)
    assert f"{ESC}[2J{ESC}[H" in reports[0]["reason"] and ESC not in outputs["test json"].stdout


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["show", "1"], [FILE_SHOWN, AUTHOR_SHOWN, MESSAGE_SHOWN, DIRECTIVE_SHOWN, REASON_SHOWN, CODE_SHOWN]),
        (["show", "2"], [AUTHOR_SHOWN, MESSAGE_SHOWN, BIDI_SHOWN]),
        (["list"], [AUTHOR_SHOWN]),
        (["leaderboard", "--wide"], [AUTHOR_SHOWN, REASON_SHOWN]),
        (["leaderboard", "--narrow"], [REASON_SHOWN]),
        # markdown doubles a backslash, so that the page shows one
        (["leaderboard", "--format", "markdown"], [AUTHOR_SHOWN.replace("\\", "\\\\")]),
        (["leaderboard", "--format", "html"], [AUTHOR_SHOWN, REASON_SHOWN, CODE_SHOWN, BIDI_SHOWN]),
        (["diff", "1"], [CODE_SHOWN, BIDI_SHOWN, DIRECTIVE_SHOWN.replace("=", " ")]),
        (["diff", "2", "--against", "1"], [CODE_SHOWN]),
        (["history"], [AUTHOR_SHOWN, REASON_SHOWN, CODE_SHOWN, BIDI_SHOWN]),
        # the top three: the reference may rank above mallory's honest copy of it, never two more
        (["history", "--rank", "--limit", "3"], [AUTHOR_SHOWN]),
        (["prompt", "render", "fix", "--from", "1"], [REASON_SHOWN, CODE_SHOWN, AUTHOR_SHOWN, MESSAGE_SHOWN]),
        (["experiments"], []),
        (["experiments", "show", "1"], [r"summary\x1b]52;c;"]),
        (
            ["experiments", "show", "1", "--full"],
            [CODE_SHOWN, r"\u202eevil\u202c done\rOVER", r"stderr\x1b[2J\x9b31m"],
        ),
        (["experiments", "show", "1", "--format", "html"], [r"summary\x1b]52;c;"]),
    ],
    ids=lambda value: (
        " ".join(value)
        if isinstance(value, list)
        and value
        and value[0] in ("show", "list", "leaderboard", "diff", "history", "prompt", "experiments")
        else ""
    ),
)
def test_each_report_shows_the_candidates_text_escaped(hostile, command, shown):
    done = harness(hostile["db"], *command, env={"PAGER": "cat"})
    assert done.returncode == 0, done.stderr
    assert_no_raw_controls(done.stdout + done.stderr, " ".join(command))
    for text in shown:
        assert text in done.stdout, f"{' '.join(command)} does not show {text!r}:\n{done.stdout[:3000]}"


def test_a_report_written_to_a_file_has_no_raw_control(hostile):
    for fmt in ("markdown", "html", "table"):
        out = hostile["folder"] / f"board.{fmt}"
        done = harness(hostile["db"], "leaderboard", "--format", fmt, "--out", out)
        assert done.returncode == 0, done.stderr
        text = out.read_text(encoding="utf-8")
        assert_no_raw_controls(text, f"leaderboard --format {fmt} --out")
        assert (REASON_SHOWN.replace("\\", "\\\\") if fmt == "markdown" else REASON_SHOWN) in text


@pytest.mark.parametrize(
    "command",
    [
        ["show", "1"],
        ["list"],
        ["leaderboard"],
        ["history"],
        ["test", "1", "--device", "cpu"],
        ["experiments"],
    ],
)
def test_json_escapes_every_control_and_keeps_the_text(hostile, command):
    """JSON writes the characters as `\\u` escapes (pydantic leaves C1 and bidi raw: they are
    escaped too), and a tool reads back the text as it was registered."""
    done = harness(hostile["db"], *command, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    assert_no_raw_controls(done.stdout, f"{' '.join(command)} --format json")
    data = json.loads(done.stdout)
    kept = list(strings(data))
    if command[0] in ("show", "list", "leaderboard", "history"):
        assert AUTHOR in kept
    if command[0] in ("show", "leaderboard", "test"):
        assert any("\x9b31msecret" + "\b" * 6 + "\u202egnp.exe" in text for text in kept)


def strings(data: object):
    """Every string in parsed JSON."""
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for value in data.values():
            yield from strings(value)
    elif isinstance(data, list):
        for value in data:
            yield from strings(value)


def test_the_ranked_table_escapes_names_and_keeps_its_colours():
    """A ranked entry (the CPU timings above are flagged, never ranked) with a hostile lineage
    label, author and flag, rendered wide for a terminal."""
    from harness.report.leaderboard import leaderboard_renderable
    from harness.report.terminal import render_text
    from harness.standing.board import Leaderboard, LeaderboardEntry, VerdictSummary

    entry = LeaderboardEntry(
        rank=1,
        submission_id=7,
        lineage=f"name{ESC}[2J",
        revision=1,
        parent_id=None,
        author=AUTHOR,
        status="pass",
        reason="",
        score_ms=1.0,
        speedup_vs_reference=2.0,
        vs_parent="faster",
        flags=[f"flag{ESC}]0;t{BEL}"],
        benchmarks=[],
        verdicts={name: VerdictSummary(status="pass") for name in ("gpumode", "accurate")},
        accuracy={},
    )
    board = Leaderboard(
        task="conv2d_v2", device="cpu", verdict="gpumode", mode="benchmark", reference_ms=2.0, entries=[entry]
    )
    shown = render_text(leaderboard_renderable(board, wide=True), width=400, color=True)
    assert HARNESS_COLOUR.search(shown)
    assert_no_raw_controls(HARNESS_COLOUR.sub("", shown), "the ranked table")
    for text in (AUTHOR_SHOWN, r"name\x1b[2J r1", r"flag\x1b]0;t\x07"):
        assert text in HARNESS_COLOUR.sub("", shown), shown


@pytest.mark.parametrize(
    "command",
    [
        ["show", "1"],
        ["list"],
        ["leaderboard", "--wide"],
        ["diff", "1"],
        ["history"],
        ["test", "1", "--device", "cpu"],
    ],
)
def test_on_a_terminal_only_the_harness_colours_are_escape_codes(hostile, command):
    """On a pty the harness colours its tables and diffs; the candidate's text is still escaped
    (LINES=10 sends the history through the pager, here `cat`)."""
    shown = terminal_text(hostile["db"], *command, env={"PAGER": "cat", "LINES": "10"})
    plain = HARNESS_COLOUR.sub("", shown)
    assert_no_raw_controls(plain, f"{' '.join(command)} on a terminal")
    assert "\\x1b" in plain
    if command[0] in ("leaderboard", "diff", "history", "test"):
        assert HARNESS_COLOUR.search(shown), f"{command} is not coloured on a terminal"
