"""Registering revisions: the defaults, dedup, external ids, seeds, and every rejected input, both
through harness.store.revisions and through the `harness` command line."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import func, select

from harness.candidates import read_seeds
from harness.errors import HarnessError
from harness.store.models import Blob, Revision
from harness.store.revisions import (
    get_or_create_secret,
    get_revision,
    list_revisions,
    register_revision,
    register_seeds,
    revision_code,
)
from harness.store.session import open_store

ENTRY = b"def custom_kernel(data):\n    return data[2]\n"


@pytest.fixture
def store(store_url):
    opened = open_store(store_url)
    yield opened
    opened.close()


def register(store, content: bytes, filename: str = "conv_fast.py", **options):
    """Register in its own transaction; returns (id, lineage name, number, parent id, created)."""
    with store.session() as session:
        outcome = register_revision(session, content, filename, **options)
        revision = outcome.revision
        return revision.id, revision.lineage.name, revision.number, revision.parent_id, outcome.created


def count_rows(store, model) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(model))


# --- the rules, in process -------------------------------------------------------------------


def test_lineage_parent_and_task_defaults(store):
    first = register(store, ENTRY)
    second = register(store, ENTRY + b"# tuned\n", "elsewhere/conv_fast.py")
    assert first == (first[0], "conv_fast", 1, None, True)
    assert second == (second[0], "conv_fast", 2, first[0], True)
    with store.session() as session:
        revision = get_revision(session, second[0])
        assert (revision.task, revision.filename, revision.entry_point) == (
            "conv2d_v2",
            "conv_fast.py",
            "custom_kernel",
        )
        assert revision.created_at.tzinfo is None  # naive UTC, as utcnow() stores it


def test_the_exact_bytes_are_kept(store):
    content = b"#!POPCORN leaderboard conv2d_v2\r\ndef custom_kernel(data):\r\n\treturn data[2]   \n\n# end"
    revision_id = register(store, content)[0]
    with store.session() as session:
        assert revision_code(get_revision(session, revision_id)) == content


def test_the_same_bytes_in_the_same_lineage_register_nothing(store):
    first_id = register(store, ENTRY)[0]
    register(store, ENTRY + b"# v2\n")
    again = register(store, ENTRY, message="again", submission_id=777)
    assert again == (first_id, "conv_fast", 1, None, False)
    assert count_rows(store, Revision) == 2


def test_the_same_bytes_in_another_lineage_are_a_new_revision_sharing_the_blob(store):
    first = register(store, ENTRY)
    other = register(store, ENTRY, lineage="conv_copy")
    assert other[1:] == ("conv_copy", 1, None, True) and other[0] != first[0]
    assert count_rows(store, Blob) == 1


def test_an_explicit_parent_may_come_from_another_lineage(store):
    base = register(store, ENTRY, "base.py")[0]
    register(store, ENTRY + b"# a\n", "fork.py")
    forked = register(store, ENTRY + b"# b\n", "fork.py", parent_id=base, lineage="fork")
    assert forked[1:4] == ("fork", 2, base)


def test_a_parent_without_a_lineage_keeps_the_parents_lineage(store):
    base = register(store, ENTRY, "base.py")[0]
    child = register(store, ENTRY + b"# b\n", "tweaked_copy.py", parent_id=base)
    assert child[1:4] == ("base", 2, base)


def test_an_external_id_is_kept_and_generated_ids_continue_after_it(store):
    kept = register(store, ENTRY, submission_id=99237)
    assert kept[0] == 99237
    assert register(store, ENTRY + b"# next\n")[0] == 99238


def test_the_task_comes_from_the_leaderboard_directive(store):
    content = b"#!POPCORN leaderboard conv2d_v2\n#!POPCORN gpu B200\n" + ENTRY
    revision_id = register(store, content)[0]
    with store.session() as session:
        revision = get_revision(session, revision_id)
        assert (revision.task, revision.directives) == (
            "conv2d_v2",
            {"leaderboard": "conv2d_v2", "gpu": "B200"},
        )


def test_a_syntax_error_is_registered_with_its_flag(store):
    revision_id = register(store, b"def custom_kernel(data:\n")[0]
    with store.session() as session:
        revision = get_revision(session, revision_id)
        assert revision.flags == ["syntax_error"] and revision.syntax_error.startswith("line 1:")


@pytest.mark.parametrize(
    ("content", "filename", "options", "message"),
    [
        (ENTRY, "k.py", {"parent_id": 4242}, "unknown parent: there is no submission 4242"),
        (ENTRY, "k.py", {"task": "no_such_task"}, "unknown task 'no_such_task'"),
        (b"#!POPCORN leaderboard other_board\n" + ENTRY, "k.py", {}, "unknown task 'other_board'"),
        (ENTRY, "my kernel.py", {}, r"'my kernel' is not a valid lineage name.*--lineage"),
        (ENTRY, "k.py", {"lineage": "-x"}, "not a valid lineage name"),
        (ENTRY, "k.py", {"submission_id": 0}, "submission id must be an integer from 1"),
        (b"", "k.py", {}, "k.py is empty"),
        (b"\xff\xfe" + ENTRY, "k.py", {}, "not UTF-8"),
    ],
)
def test_bad_input_is_rejected_and_nothing_is_written(
    store, store_url, dump_store, content, filename, options, message
):
    register(store, ENTRY + b"# existing\n", "k.py")
    before = dump_store(store_url)
    with pytest.raises(HarnessError, match=message):
        register(store, content, filename, **options)
    assert dump_store(store_url) == before


def test_a_taken_id_is_rejected_and_nothing_is_written(store, store_url, dump_store):
    register(store, ENTRY, "a.py", submission_id=512024)
    before = dump_store(store_url)
    with pytest.raises(HarnessError, match=r"submission id 512024 is already taken \(a r1\)"):
        register(store, ENTRY + b"# other\n", "b.py", submission_id=512024)
    assert dump_store(store_url) == before


def test_list_filters_by_task_and_lineage(store):
    a = register(store, ENTRY, "a.py")[0]
    b = register(store, ENTRY, "b.py")[0]
    a2 = register(store, ENTRY + b"# 2\n", "a.py")[0]
    with store.session() as session:
        assert [r.id for r in list_revisions(session)] == [a, b, a2]
        assert [r.id for r in list_revisions(session, lineage="a")] == [a, a2]
        assert [r.id for r in list_revisions(session, task="conv2d_v2", lineage="b")] == [b]
        with pytest.raises(HarnessError, match="unknown lineage 'c'"):
            list_revisions(session, lineage="c")
        with pytest.raises(HarnessError, match="there is no submission 5"):
            get_revision(session, 5)


def test_a_secret_is_created_once_and_kept(store):
    with store.session() as session:
        value = get_or_create_secret(session, "leaderboard_seed")
    with store.session() as session:
        assert get_or_create_secret(session, "leaderboard_seed") == value
        assert get_or_create_secret(session, "other") != value
    assert 0 <= int(value) < 2**63


# --- seeds -----------------------------------------------------------------------------------


def write_manifest(directory: Path, second_id: int = 512024) -> Path:
    (directory / "k_before.py").write_bytes(ENTRY)
    (directory / "k.py").write_bytes(ENTRY + b"# after\n")
    (directory / "ref.py").write_bytes(b"#!POPCORN leaderboard conv2d_v2\n" + ENTRY)
    manifest = directory / "manifest.yml"
    manifest.write_text(
        "lineages:\n"
        "  - name: ref\n    author: harness\n    revisions:\n      - file: ref.py\n"
        "  - name: kern\n    author: gpumode\n    revisions:\n"
        f"      - file: k_before.py\n        message: before\n      - file: k.py\n        id: {second_id}\n"
    )
    return manifest


def test_seeding_registers_each_lineage_in_order_and_a_second_run_registers_nothing(store, tmp_path):
    seeds = read_seeds(write_manifest(tmp_path))
    with store.session() as session:
        first = [
            (o.revision.lineage.name, o.revision.number, o.revision.parent_id, o.created)
            for o in register_seeds(session, seeds)
        ]
        before_id = session.scalar(select(Revision.id).where(Revision.filename == "k_before.py"))
    assert first == [("ref", 1, None, True), ("kern", 1, None, True), ("kern", 2, before_id, True)]
    with store.session() as session:
        again = register_seeds(session, seeds)
        assert [o.created for o in again] == [False, False, False]
        assert again[2].revision.id == 512024
    assert count_rows(store, Revision) == 3


def test_a_failing_seed_leaves_nothing_behind(store, store_url, dump_store, tmp_path):
    register(store, ENTRY + b"# holds the id\n", "x.py", submission_id=512024)
    before = dump_store(store_url)
    seeds = read_seeds(write_manifest(tmp_path))
    with pytest.raises(HarnessError, match="512024 is already taken"), store.session() as session:
        register_seeds(session, seeds)
    assert dump_store(store_url) == before


# --- the command line ------------------------------------------------------------------------


def test_init_register_list_and_show(run_cli, store_url, tmp_path):
    init = run_cli("init")
    assert init.returncode == 0 and "(created)" in init.stdout and init.stderr == ""
    assert Path(store_url.removeprefix("sqlite:///")).is_file()

    before = tmp_path / "conv2d_a100_ultra_before.py"
    before.write_bytes(ENTRY)
    after = tmp_path / "conv2d_a100_ultra.py"
    after.write_bytes(b"#!POPCORN gpu A100\nimport torch\ntorch.cuda.Event = None\n" + ENTRY)
    first = run_cli("register", before, "--lineage", "conv2d_a100_ultra", "--author", "me")
    assert first.stdout == "registered submission 1: conv2d_a100_ultra r1 (no parent)\n", first.stderr
    second = run_cli("register", after, "--id", 99237, "-m", "A100 configs")
    assert second.stdout.splitlines() == [
        "registered submission 99237: conv2d_a100_ultra r2 (parent 1)",
        "  flags: monkeypatching",
    ]
    again = run_cli("register", after)
    assert again.returncode == 0
    assert again.stdout == "unchanged: these bytes are already submission 99237 (conv2d_a100_ultra r2)\n"

    listed = run_cli("list", "--lineage", "conv2d_a100_ultra")
    rows = [line.split() for line in listed.stdout.splitlines()[2:] if line.strip()]
    assert rows[0][:5] == ["1", "conv2d_a100_ultra", "r1", "conv2d_v2", "me"]  # no parent: an empty cell
    assert rows[1][:5] == ["99237", "conv2d_a100_ultra", "r2", "1", "conv2d_v2"]
    assert rows[1][-1] == "monkeypatching" and len(rows) == 2

    shown = run_cli("show", 99237)
    header, code = shown.stdout.split("--- conv2d_a100_ultra.py (", 1)
    assert "submission 99237: conv2d_a100_ultra r2" in header
    assert "parent:      1" in header and "flags:       monkeypatching" in header
    assert "directives:  gpu=A100" in header and "message:     A100 configs" in header
    assert code.split(" bytes) ---\n", 1)[1] == after.read_text()


def test_seed_twice(run_cli, tmp_path):
    manifest = write_manifest(tmp_path)
    first = run_cli("seed", "--manifest", manifest)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "3 registered, 0 already there"
    assert "registered submission 512024: kern r2 (parent 2)" in first.stdout
    second = run_cli("seed", "--manifest", manifest)
    assert second.stdout.splitlines()[-1] == "nothing new: all 3 seed revisions are already registered"


def test_python_dash_m_harness_runs_the_cli(store_url):
    for command in ("init", "list"):
        result = subprocess.run(
            [sys.executable, "-m", "harness", command, "--db", store_url],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no submissions yet")


def _rejections(tmp_path: Path) -> list[tuple[list[object], str]]:
    (tmp_path / "empty.py").write_bytes(b"")
    (tmp_path / "binary.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "latin1.py").write_bytes("# d\u00e9j\u00e0\n".encode("latin-1") + ENTRY)
    (tmp_path / "huge.py").write_bytes(ENTRY + b"#" * 1_000_000)
    (tmp_path / "good.py").write_bytes(ENTRY + b"# good\n")
    return [
        (["register", tmp_path / "missing.py"], "no such file"),
        (["register", tmp_path], "is a directory"),
        (["register", tmp_path / "empty.py"], "is empty"),
        (["register", tmp_path / "binary.py"], "binary"),
        (["register", tmp_path / "latin1.py"], "not UTF-8 text"),
        (["register", tmp_path / "huge.py"], "over the limit of 1000000 bytes"),
        (["register", tmp_path / "good.py", "--parent", 31337], "unknown parent"),
        (["register", tmp_path / "good.py", "--task", "conv3d"], "unknown task 'conv3d'"),
        (["register", tmp_path / "good.py", "--id", 7], "submission id 7 is already taken"),
        (["register", tmp_path / "good.py", "--db", "nosuchdb://x"], "unknown database kind 'nosuchdb'"),
        (
            ["list", "--db", "sqlite:////nonexistent/dir/x.sqlite"],
            "directory /nonexistent/dir does not exist",
        ),
        (["show", 123456], "there is no submission 123456"),
        (["seed", "--manifest", tmp_path / "none.yml"], "no such manifest"),
    ]


def test_every_rejected_input_is_one_line_exit_2_and_writes_nothing(run_cli, store_url, dump_store, tmp_path):
    existing = tmp_path / "existing.py"
    existing.write_bytes(ENTRY)
    assert run_cli("register", existing, "--id", 7).returncode == 0
    before = dump_store(store_url)
    rejections = _rejections(tmp_path)
    with ThreadPoolExecutor(max_workers=2) as pool:  # each is rejected alone; together they run faster
        results = list(pool.map(lambda case: run_cli(*case[0]), rejections))
    for (args, message), result in zip(rejections, results):
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr.startswith("error: ") and message in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and result.stdout == "", (args, result.stderr)
    assert dump_store(store_url) == before
    assert not Path("/nonexistent/dir").exists()


def test_a_rejected_file_does_not_create_the_store(run_cli, store_url, tmp_path):
    result = run_cli("register", tmp_path / "missing.py")
    assert result.returncode == 2
    assert not Path(store_url.removeprefix("sqlite:///")).exists()
