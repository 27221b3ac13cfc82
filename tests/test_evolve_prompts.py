"""Prompt templates: the shipped ones render for a registered revision, and a template that uses
an unknown variable, includes a missing part or has a syntax error is a clear HarnessError."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import CANDIDATES_DIR, PROMPTS_DIR
from harness.errors import HarnessError
from harness.evolve.prompts import (
    check_template,
    prompt_context,
    render_step_prompt,
    render_template,
    summarize_check,
    template_names,
)
from harness.store.revisions import get_revision, register_revision
from harness.store.session import open_store
from harness.wire import Mismatch, ShapeCheck

ULTRA = CANDIDATES_DIR / "conv2d_a100_ultra.py"


@pytest.fixture
def store_with_revision(tmp_path: Path):
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    with store.session() as session:
        revision = register_revision(
            session, ULTRA.read_bytes(), ULTRA.name, message="seed", author="someone"
        )
        revision_id = revision.revision.id
    yield store, revision_id
    store.close()


def test_shipped_templates():
    assert template_names() == ["fix", "improve", "system"]
    assert check_template("improve.j2") == "improve"


@pytest.mark.parametrize("template", ["improve", "fix", "system"])
def test_shipped_templates_render_for_a_revision_without_results(store_with_revision, template):
    store, revision_id = store_with_revision
    with store.session() as session:
        context = prompt_context(session, get_revision(session, revision_id))
    text = render_template(template, context)
    assert "conv2d_v2" in text and "{{" not in text and "{%" not in text
    if template != "system":
        code = ULTRA.read_text(encoding="utf-8")
        assert f"```python\n{code}\n```" in text  # the parent's exact code, fenced
        assert "<<<<<<< SEARCH" in text and ">>>>>>> REPLACE" in text  # the reply format
        assert f"submission {revision_id}" in text and "someone: seed" in text


def test_step_prompt_starts_with_the_system_prompt(store_with_revision):
    store, revision_id = store_with_revision
    with store.session() as session:
        context = prompt_context(session, get_revision(session, revision_id))
    text = render_step_prompt("improve", context)
    assert text.startswith(render_template("system", context).rstrip())
    assert text.endswith(render_template("improve", context))


def test_the_fence_is_longer_than_any_backticks_in_the_code(tmp_path: Path):
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    code = b'DOC = """\n````python\nx\n````\n"""\n\ndef custom_kernel(data):\n    return data[2]\n'
    with store.session() as session:
        revision = register_revision(session, code, "fenced.py").revision
        text = render_template("improve", prompt_context(session, revision))
    store.close()
    assert "`````python\n" + code.decode() + "\n`````" in text


def write_templates(directory: Path, **templates: str) -> Path:
    directory.mkdir()
    for name, text in templates.items():
        (directory / f"{name}.j2").write_text(text)
    return directory


def test_an_unknown_variable_is_an_error_naming_it(tmp_path: Path):
    prompts = write_templates(tmp_path / "prompts", improve="Task {{ task.name }}\n\nScore: {{ scoer_ms }}\n")
    with pytest.raises(
        HarnessError, match=r"improve\.j2 line 3 uses an undefined variable: 'scoer_ms' is undefined"
    ):
        render_template("improve", {"task": {"name": "conv2d_v2"}}, prompts)


def test_an_unknown_attribute_is_an_error_too(tmp_path: Path):
    prompts = write_templates(tmp_path / "prompts", fix="{{ parent.nmae }}")
    with pytest.raises(HarnessError, match="undefined variable: 'dict object' has no attribute 'nmae'"):
        render_template("fix", {"parent": {"name": "x"}}, prompts)


def test_an_unknown_variable_in_an_included_part_names_the_part(tmp_path: Path):
    prompts = write_templates(
        tmp_path / "prompts", improve="x\n{% include '_part.j2' %}", _part="\n\n{{ nope }}"
    )
    with pytest.raises(HarnessError, match=r"_part\.j2 line 3 uses an undefined variable: 'nope'"):
        render_template("improve", {}, prompts)
    assert template_names(prompts) == ["improve"]


def test_missing_templates_parts_and_syntax_errors(tmp_path: Path):
    prompts = write_templates(
        tmp_path / "prompts", improve="{% include '_gone.j2' %}", fix="{% if x %}never closed"
    )
    with pytest.raises(HarnessError, match="no prompt template 'system'.*templates: fix, improve"):
        render_template("system", {}, prompts)
    with pytest.raises(HarnessError, match="includes _gone.j2, which is not in"):
        render_template("improve", {}, prompts)
    with pytest.raises(HarnessError, match=r"fix\.j2 line 1: Unexpected end of template"):
        render_template("fix", {"x": True}, prompts)


def test_check_summary_reads_the_stored_check():
    summary = summarize_check(
        "3 elements differ",
        ShapeCheck(
            passed=False,
            mismatches=3,
            not_finite=1,
            first_mismatches=[Mismatch(index=[0, 1, 2, 3], received=1.5, expected=1.25)],
            max_abs_err=0.25,
            rel_l2=0.0123456,
        ),
    )
    assert summary == (
        "3 elements differ; 3 mismatched elements (1 not finite); max abs error 0.25; "
        "relative L2 error 0.0123; first: at [0, 1, 2, 3] got 1.5 expected 1.25"
    )
    assert summarize_check("", ShapeCheck()) == "failed (no details recorded)"


def run_harness(*args: str, db: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args, "--db", db], capture_output=True, text=True, check=False
    )


def test_prompt_render_command(store_with_revision, tmp_path: Path):
    store, revision_id = store_with_revision
    db = store.url
    result = run_harness("prompt", "render", "improve", "--from", str(revision_id), db=db)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# Task: conv2d_v2\n")
    assert ULTRA.read_text(encoding="utf-8") in result.stdout

    missing = run_harness("prompt", "render", "imprve", "--from", str(revision_id), db=db)
    assert missing.returncode == 2 and missing.stdout == ""
    assert (
        missing.stderr
        == f"error: no prompt template 'imprve' in {PROMPTS_DIR} (templates: fix, improve, system)\n"
    )

    unknown = run_harness("prompt", "render", "fix", "--from", "999", db=db)
    assert (unknown.returncode, unknown.stderr) == (2, "error: there is no submission 999\n")
