"""The one exception type that reaches the user as a single line on stderr (exit code 2)."""


class HarnessError(Exception):
    """Bad input or an impossible request: the CLI prints `error: <message>` and exits with 2.

    Raise it before anything is written, so that a rejected command leaves the store as it was.
    """
