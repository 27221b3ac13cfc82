"""Calls sys.exit(0) while being imported: a clean exit before any call."""
import sys

sys.exit(0)
