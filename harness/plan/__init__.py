"""The plan: what to evaluate, claimed in the store, handed to an executor, recorded in the store.

`phases` runs one phase (`Phase`: checked or timed, public or secret seeds) over a list of
revisions; `checks` is `harness test`, `bench` is `harness bench`, and `tournament` runs the
phases in turn over every revision of a task. The plan is the only writer of results; what the
executors and the sandbox run knows nothing of the store.
"""
