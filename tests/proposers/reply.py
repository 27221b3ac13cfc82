"""A proposer for the tests: reads the prompt on stdin, replies on stdout in the way MODE says.

    python tests/proposers/reply.py MODE [ARG]

Modes: whole-file, search-replace, no-match, garbage, same, hang PIDFILE, fail, bad-meta, fix
(a fix prompt with a mismatch summary: drop the ` + 1` that makes the parent wrong), break (add
` + 1` to the convolution), slow (sleep 10 to 30 ms in every call: a right child, far slower, its times spread), and
second-call-hangs STATE_DIR (counts its calls in STATE_DIR/calls; the second call writes its pid
to STATE_DIR/hanging and sleeps, every other call marks the first import line with its number).
It finds the parent's code in the prompt the way an agent would: the fenced block after
the heading `# The revision to ...` (prompts/improve.j2, prompts/fix.j2).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

MARK = "  # touched by the test proposer"


def parent_code(prompt: str) -> str:
    lines = prompt.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("# The revision to"))
    opening = next(
        i for i in range(start, len(lines)) if lines[i].startswith("```") and lines[i].endswith("python")
    )
    fence = lines[opening][: -len("python")]
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i] == fence)
    return "\n".join(lines[opening + 1 : closing])


def unique_import_line(code: str) -> str:
    lines = code.split("\n")
    return next(line for line in lines if line.startswith("import ") and lines.count(line) == 1)


def meta(summary: str) -> str:
    return "HARNESS-META " + json.dumps({"summary": summary, "tokens": 1234, "cost": 0.01, "model": "test"})


def second_call_hangs(state: Path, code: str) -> None:
    counter = state / "calls"
    calls = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(calls))
    if calls == 2:
        (state / "hanging").write_text(str(os.getpid()))
        time.sleep(300)
        return
    line = unique_import_line(code)
    print(f"<<<<<<< SEARCH\n{line}\n=======\n{line}  # call {calls}\n>>>>>>> REPLACE")
    print(meta(f"call {calls}: mark {line!r}"))


def main() -> None:
    mode = sys.argv[1]
    prompt = sys.stdin.read()
    if mode == "second-call-hangs":
        second_call_hangs(Path(sys.argv[2]), parent_code(prompt))
        return
    if mode == "hang":
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        with open(sys.argv[2], "w") as pidfile:
            pidfile.write(str(sleeper.pid))
        time.sleep(300)
        return
    if mode == "fail":
        print("the model is overloaded", file=sys.stderr)
        sys.exit(3)
    if mode == "garbage":
        print("I think the kernel is fine as it is. Have a nice day!")
        return
    if mode == "bad-meta":
        print("```python\nprint('x')\n```")
        print("HARNESS-META {not json")
        return
    code = parent_code(prompt)
    if mode == "fix":
        if "# The revision to fix" not in prompt or "mismatched elements" not in prompt:
            sys.exit("not a fix prompt with a mismatch summary")
        line = next(line for line in code.split("\n") if line.endswith(" + 1)"))
        fixed = line.removesuffix(" + 1)") + ")"
        print(f"<<<<<<< SEARCH\n{line}\n=======\n{fixed}\n>>>>>>> REPLACE")
        print(meta("drop the + 1"))
        return
    if mode == "break":  # add ` + 1` to the convolution: a child wrong on every shape
        line = next(line for line in code.split("\n") if line.rstrip().endswith("(input_tensor, kernel))"))
        print(f"<<<<<<< SEARCH\n{line}\n=======\n{line.removesuffix(')')} + 1)\n>>>>>>> REPLACE")
        print(meta("add one"))
        return
    if mode == "slow":  # sleep before the convolution: right on every shape, 10-30 ms slower a call
        line = next(line for line in code.split("\n") if line.rstrip().endswith("(input_tensor, kernel))"))
        indent = line[: len(line) - len(line.lstrip())]
        print(
            f"<<<<<<< SEARCH\n{line}\n=======\n{indent}__import__('time').sleep(0.01 + 0.02 * __import__('random').random())\n{line}\n>>>>>>> REPLACE"
        )
        print(meta("sleep first"))
        return
    if mode == "same":  # the parent as it is (a fence cannot give back a missing final newline)
        print(f"```python\n{code if code.endswith(chr(10)) else code + chr(10)}```")
        return
    if mode == "whole-file":
        print("Here is the whole file with a comment added at the end.\n")
        print(f"```python\n{code.rstrip()}\n# whole file from the test proposer\n```")
        print(meta("append a comment line"))
        return
    line = unique_import_line(code)
    if mode == "search-replace":
        print("One edit:\n")
        print(f"<<<<<<< SEARCH\n{line}\n=======\n{line}{MARK}\n>>>>>>> REPLACE")
        print(meta(f"mark the line {line!r}"), file=sys.stderr)
        return
    if mode == "no-match":
        print(f"<<<<<<< SEARCH\n{line}\n=======\n{line}{MARK}\n>>>>>>> REPLACE\n")
        print("<<<<<<< SEARCH\nthis line is not in the parent\n=======\nx = 1\n>>>>>>> REPLACE")
        return
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
