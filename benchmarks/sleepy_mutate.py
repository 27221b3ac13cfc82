#!/usr/bin/env python3
"""A proposer command for benchmarks: builtin:mutate behind a sleep, as an LLM that takes SECONDS
to reply would be. It reads the prompt on stdin, finds the parent's code in it (the fenced block
after `# The revision to ...`, prompts/improve.j2 and fix.j2), sleeps, and answers with the
mutated file in one fenced block, seeded by HARNESS_STEP_SEED (set by the harness per step).

    harness evolve ... --proposer "python benchmarks/sleepy_mutate.py 20"
"""

from __future__ import annotations

import json
import os
import sys
import time

from harness.evolve.mutate import mutate_candidate
from harness.evolve.outcomes import ProposerFailed


def parent_code(prompt: str) -> str:
    lines = prompt.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("# The revision to"))
    opening = next(
        i for i in range(start, len(lines)) if lines[i].startswith("```") and lines[i].endswith("python")
    )
    fence = lines[opening][: -len("python")]
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i] == fence)
    return "\n".join(lines[opening + 1 : closing]) + "\n"


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    prompt = sys.stdin.read()
    started = time.monotonic()
    code = parent_code(prompt).encode()
    try:
        mutation = mutate_candidate(code, os.environ.get("HARNESS_STEP_SEED", "0"))
    except ProposerFailed as exc:
        print(str(exc), file=sys.stderr)
        return 3
    time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    print("```python\n" + mutation.content.decode().rstrip("\n") + "\n```")
    print("HARNESS-META " + json.dumps({"summary": mutation.summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
