"""The one exception type that reaches the user as a single line on stderr (exit code 2)."""


class HarnessError(Exception):
    """Bad input or an impossible request: the CLI prints `error: <message>` and exits with 2.

    Raise it before anything is written, so that a rejected command leaves the store as it was.
    """


class TaskUnsupported(HarnessError):
    """The task cannot run here (its reference needs a module this machine lacks, its inputs are
    made on another device, its reference fails on this GPU, its data holds what the child cannot
    be handed): an evaluation of it is `unsupported` with this one line, never an error of the
    run."""


def validation_message(message: str) -> str:
    """A pydantic error message without the error type pydantic puts before a validator's own
    words ("Value error, ", "Assertion failed, ")."""
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message
