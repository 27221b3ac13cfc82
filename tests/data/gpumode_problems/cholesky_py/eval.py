# The problem's own runner (GPU MODE ships one per set); the harness does not run it.
