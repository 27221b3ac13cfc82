"""The wheel carries the checkout's top-level data folders as package data under harness/_data
(candidates/, prompts/, db/migrations/), so that an installed harness needs no checkout; in the
repository they stay at the top, where people edit them (harness.config finds either). The rest of
the project's metadata is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"candidates": "candidates", "prompts": "prompts", "db/migrations": "migrations"}
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", "*.sqlite", "*.sqlite-*")


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's folders
            return
        root = Path(__file__).resolve().parent
        target = Path(self.build_lib, "harness", "_data")
        for source, name in SHIPPED.items():
            shutil.copytree(root / source, target / name, ignore=LEFT_OUT, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithData})
