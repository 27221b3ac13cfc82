"""A proposer for the parallel tests: records when it starts and ends, sleeps, and answers with
the parent's code plus one comment line naming its step (a child that behaves exactly as its
parent), and says something on stderr.

    python tests/proposers/sleepy.py STATE_DIR SECONDS [fixed-comment | fail | slower | together=N]

`together=N`: instead of sleeping SECONDS, wait until N calls have started (each leaves a file
`started-SEED` in STATE_DIR), SECONDS at most: calls that the harness has in flight at once all
start before any of them ends, however slowly a loaded machine starts them, and calls that run
one after another do not (the first ends SECONDS after it started, before the next one starts);
`fixed-comment`: the same comment whatever the step (so two steps from one parent propose the
same bytes); `fail`: exit with status 3 after saying "no idea" on stderr; `slower`: the parent
with a 2 ms sleep in every call.

Each call appends one line `{"seed": ..., "start": ..., "end": ...}` (wall-clock seconds) to
STATE_DIR/calls.jsonl; the seed is HARNESS_STEP_SEED, which the harness sets per step.
"""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from reply import meta, parent_code

state, seconds = Path(sys.argv[1]), float(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "step-comment"
seed = os.environ["HARNESS_STEP_SEED"]
start = time.time()
prompt = sys.stdin.read()
if mode.startswith("together="):
    calls = int(mode.removeprefix("together="))
    (state / f"started-{seed}").touch()
    print(f"sleepy proposer: step {seed}, waiting for {calls} calls (at most {seconds:g} s)", file=sys.stderr)
    while len(list(state.glob("started-*"))) < calls and time.time() < start + seconds:
        time.sleep(0.05)
else:
    print(f"sleepy proposer: step {seed}, sleeping {seconds:g} s", file=sys.stderr)
    time.sleep(seconds)
if mode == "fail":
    print("no idea", file=sys.stderr)
    sys.exit(3)
code = parent_code(prompt)
if mode == "slower":
    code = "import time\n" + code.replace("    return output", "    time.sleep(0.002)\n    return output")
comment = "# a fixed comment" if mode == "fixed-comment" else f"# step {seed}"
print(f"```python\n{code.rstrip()}\n{comment}\n```")
print(meta(f"comment for step {seed}"))
end = time.time()
with (state / "calls.jsonl").open("a") as calls:
    calls.write(json.dumps({"seed": seed, "start": start, "end": end}) + "\n")
