# The problem's own runner: it calls square_forward and square_backward (not run by the harness).
