"""Text from a candidate or its registration shown as text: `escape_controls`, the one place that
makes such text safe to print, write into markdown or HTML, or put into a prompt.

A candidate's code, its file name, its POPCORN directives, the errors it raises, `--author`, `-m`
and a proposer's reply can hold characters that a terminal (or a pager, or a browser showing a
page as text) acts on instead of showing: ESC starts escape sequences (clear the screen, move the
cursor, set the window title, write the clipboard with OSC 52), CR and backspace overwrite what
was printed, C1 controls are 8-bit escape sequences, and bidi overrides and other invisible
format characters make a line read differently from what it holds. Each of them is shown as
the Python escape of its code point, in literal characters: ESC as `\\x1b`, CR as `\\r`, U+202E
as `\\u202e`, U+E0041 as `\\U000e0041` (`\\t`, `\\n` and `\\r` keep their short forms). A
backslash is not escaped, so a file that holds the four characters `\\x1b` reads the same as one
that holds ESC: nothing is hidden, and the code's own backslashes stay as they are.

Escaped: every C0 control (U+0000-U+001F), DEL and the C1 controls (U+007F-U+009F), the format
characters (Unicode category Cf: soft hyphen, zero-width spaces and joiners, bidi marks,
embeddings, overrides and isolates U+202A-U+202E and U+2066-U+2069, the BOM, tag characters),
the line and paragraph separators U+2028 and U+2029, and lone surrogates. A `block` (code, a
diff, a multi-line story) keeps its line breaks and tabs: `\\n`, `\\t`, and `\\r` right before
`\\n` (a CRLF line end moves the cursor to where the next line starts anyway, and the seeds'
diff format keeps it); any other CR is escaped there too. Ordinary text (printable characters,
spaces, and in a block newlines and tabs) comes back unchanged, and escaping twice changes
nothing more than escaping once.

JSON keeps the text as it is, escaped the JSON way: `json.dumps` writes every such character as a
`\\u` escape, and `escape_json_controls` does it for what pydantic's `model_dump_json` leaves raw
(C1 controls, format characters).
"""

from __future__ import annotations

import re

# Cc, Cf, Zl, Zp and Cs of Unicode 15 (a superset of older versions' format characters);
# tests/test_control_characters.py checks it against the running Python's unicodedata.
_ESCAPED_RANGES = (
    (0x00, 0x1F),
    (0x7F, 0x9F),
    (0xAD, 0xAD),
    (0x600, 0x605),
    (0x61C, 0x61C),
    (0x6DD, 0x6DD),
    (0x70F, 0x70F),
    (0x890, 0x891),
    (0x8E2, 0x8E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xD800, 0xDFFF),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
_KEPT_IN_BLOCK = "\t\n"


def _character_class(exclude: str = "") -> str:
    parts = []
    for start, end in _ESCAPED_RANGES:
        code = start
        while code <= end:  # split a range around excluded characters
            if chr(code) in exclude:
                code += 1
                continue
            stop = code
            while stop + 1 <= end and chr(stop + 1) not in exclude:
                stop += 1
            parts.append(f"\\U{code:08x}" + (f"-\\U{stop:08x}" if stop > code else ""))
            code = stop + 1
    return "[" + "".join(parts) + "]"


_IN_LINE = re.compile(_character_class())
_IN_BLOCK = re.compile("\r(?!\n)|" + _character_class(_KEPT_IN_BLOCK + "\r"))
_IN_JSON = re.compile(_character_class("\t\n\r"))  # JSON's whitespace; never raw inside a string
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    character = match.group()
    if character in _SHORT:
        return _SHORT[character]
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape_controls(text: str, *, block: bool = False) -> str:
    """`text` with every control, format and separator character written as its escape (see
    the module docstring); `block` keeps newlines, tabs and CRLF line ends."""
    return (_IN_BLOCK if block else _IN_LINE).sub(_escape, text)


def has_controls(text: str, *, block: bool = False) -> bool:
    """Whether `escape_controls` would change `text`."""
    return (_IN_BLOCK if block else _IN_LINE).search(text) is not None


def escape_template_value(value: object) -> object:
    """A jinja2 `finalize`: every `{{ ... }}` of a template (HTML, markdown, a prompt) is shown
    with `escape_controls(..., block=True)`; autoescaped HTML stays escaped (`Markup` in,
    `Markup` out: an escape adds no HTML-significant character), numbers and None go through."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if hasattr(value, "__html__"):  # markupsafe.Markup: its own type keeps it from a second escape
        return type(value)(escape_controls(str(value), block=True))
    if isinstance(value, str):
        return escape_controls(value, block=True)
    return escape_controls(str(value), block=True)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_json_controls(text: str) -> str:
    """JSON text with every control, format and separator character inside its strings written
    as a `\\u` escape: `json.dumps` does that by default, pydantic's `model_dump_json` only for
    C0 controls (it writes C1 controls and bidi overrides as they are). Outside strings JSON
    holds only ASCII, so the escapes land in strings, and the parsed values are unchanged."""
    return _IN_JSON.sub(_json_escape, text)
