#!/usr/bin/env bash
# Creates .venv beside this file with the harness (editable) and its test tools. Safe to re-run.
# PYTHON picks the interpreter (default python3, 3.10 or newer). TORCH_SPEC picks the torch build
# (default torch==2.13.0: a CPU build where one lies on disk; on a GPU node PyPI's CUDA build).
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$py" -m venv .venv
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/pip install -q --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[test,postgres,ray]'
