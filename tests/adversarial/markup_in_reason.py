"""Fails with an exception whose message is rich markup, HTML and markdown: a report that
interprets any of it crashes (rich's MarkupError on `[/]`), runs a script in a reader's browser,
or breaks its table."""
from task import input_t, output_t

MESSAGE = "[/] [bold red]closed[/bold red] | <img src=x onerror=alert(1)> **bold**"


def custom_kernel(data: input_t) -> output_t:
    raise RuntimeError(MESSAGE)
