#!/usr/bin/env python3
"""A proposer command for benchmarks: each generation's child is its parent with one scripted
change, chosen by the generation (HARNESS_STEP_SEED, `<seed>:<generation>`) from the list of
KINDS on the command line, in turn:

- `wrong`: the parent's custom_kernel with 1 added to its output (wrong on every shape);
- `slow`: the parent's custom_kernel after a sleep of 5 to 15 ms (right, clearly slower);
- `same`: the parent with one comment line more (right, as fast).

Every change wraps the parent's entry point at the end of the file (bound at its definition, so
wrappers stack), so it applies to any parent.

    harness evolve ... --proposer "python benchmarks/scripted_proposer.py wrong slow same"
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sleepy_mutate import parent_code  # a sibling script: the prompt's fenced parent

WRAPPERS = {
    "wrong": """


def custom_kernel(data, _parent=custom_kernel):  # noqa: F811 - the scripted change: wrong everywhere
    return _parent(data).add_(1)
""",
    "slow": """


def custom_kernel(data, _parent=custom_kernel):  # noqa: F811 - the scripted change: 5-15 ms slower
    import random
    import time

    time.sleep(0.005 + 0.01 * random.random())
    return _parent(data)
""",
    "same": "\n# the scripted change: nothing but this comment\n",
}


def main() -> None:
    kinds = sys.argv[1:] or list(WRAPPERS)
    unknown = [kind for kind in kinds if kind not in WRAPPERS]
    if unknown:
        sys.exit(f"unknown kind {unknown[0]!r}: use {', '.join(WRAPPERS)}")
    generation = int(os.environ.get("HARNESS_STEP_SEED", "0:1").rsplit(":", 1)[-1])
    kind = kinds[(generation - 1) % len(kinds)]
    code = parent_code(sys.stdin.read())
    print("```python\n" + code.rstrip("\n") + "\n" + WRAPPERS[kind].rstrip("\n") + "\n```")
    print("HARNESS-META " + json.dumps({"summary": f"scripted: {kind}"}))


if __name__ == "__main__":
    main()
