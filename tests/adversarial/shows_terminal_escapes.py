"""Fails every call with an error message made of terminal escapes: it clears the screen and
draws a fake leaderboard (CSI), sets the window title (OSC 0), writes a shell command into the
clipboard (OSC 52), sends an 8-bit CSI (C1), hides text with backspaces and reverses a line with a
bidi override. tests/test_control_characters.py adds the same kinds of characters to this file's
POPCORN directives, a code line (a CR that hides it) and a comment, to its file name, `--author`
and `-m`, and checks that every report shows them escaped."""

ESC, BEL = chr(27), chr(7)
CLEAR = ESC + "[2J" + ESC + "[H"
FAKE_LEADERBOARD = ESC + "[1;32m" + "rank 1  shows_terminal_escapes  0.001 ms  999.00x" + ESC + "[0m"
TITLE = ESC + "]0;pwned-title" + BEL
CLIPBOARD = ESC + "]52;c;ZWNobyBwd25lZAo=" + BEL  # base64 of "echo pwned"
C1_CSI = chr(0x9B) + "31m"
BACKSPACES = "secret" + chr(8) * 6
BIDI = chr(0x202E) + "gnp.exe" + chr(0x202C)
MESSAGE = CLEAR + FAKE_LEADERBOARD + TITLE + CLIPBOARD + C1_CSI + BACKSPACES + BIDI


def custom_kernel(data):
    raise RuntimeError(MESSAGE)
