"""harness: a kernel evolution and agent-experiment harness."""

__version__ = "0.1.0"
