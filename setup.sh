#!/usr/bin/env bash
# Creates .venv beside this file with the harness (editable) and its test tools. Safe to re-run:
# pip runs only when pyproject.toml or setup.py changed since the last install (or with FORCE=1);
# .venv/.harness-installed keeps their hash.
# PYTHON picks the interpreter (default python3, 3.10 or newer). TORCH_SPEC picks the torch build
# (default torch==2.13.0: a CPU build where one lies on disk; on a GPU node PyPI's CUDA build).
set -euo pipefail
cd "$(dirname "$0")"
py=${PYTHON:-python3}
stamp=.venv/.harness-installed
[ -x .venv/bin/python ] || "$py" -m venv .venv
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  echo "setup.sh: installing ${TORCH_SPEC:-torch==2.13.0}"
  .venv/bin/pip install --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
fi
wanted=$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)
if [ "${FORCE:-0}" = 1 ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "setup.sh: installing the harness (editable) with its test, postgres and ray extras"
  .venv/bin/pip install --disable-pip-version-check -e '.[test,postgres,ray]'
  echo "$wanted" >"$stamp"
else
  echo "setup.sh: .venv is up to date (pyproject.toml and setup.py unchanged; FORCE=1 reinstalls)"
fi
