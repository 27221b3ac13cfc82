"""The plan: what to evaluate, claimed in the store, handed to an executor, recorded in the store.

`phases` runs one phase (`Phase`: checked or timed, public or secret seeds) over a list of
revisions; `checks` is `harness test`, `bench` is `harness bench`, and `tournament` runs the
phases in turn over every revision of a task. The plan is the only writer of results; what the
executors and the sandbox run knows nothing of the store.
"""

from harness.executors import Executor, make_executor

# what callers that hand the plan its executor need (evolve, cli): they reach the executors and
# the sandbox through the plan only (the device: harness.devices)
__all__ = ["Executor", "make_executor"]
