"""The leaderboard rendered: the terminal table (wide or narrow, plain when piped), its title and
the number formats that markdown, HTML, history and evolution share. What it shows is computed in
harness.standing.board (`build_leaderboard`: ranks, scores, speedups, comparisons with the parent,
flags); nothing here ranks, scores or compares.
"""

from __future__ import annotations

from typing import Literal

from rich.console import Group
from rich.table import Table
from rich.text import Text

from harness.judge import JUDGE_VERSION
from harness.report.terminal import fit_table, minimum_width, plain_table
from harness.report.text import escape_controls
from harness.standing.batch import NO_REFERENCE_IN_RUN
from harness.standing.board import NOT_RUN, Leaderboard, LeaderboardEntry, ShapeTiming, VerdictSummary
from harness.tasks.spec import parameter_text
from harness.verdicts import VERDICT_WORDS, VERDICTS, VerdictName
from harness.wire import shape_key

ReportFormat = Literal["table", "json", "markdown", "html"]


def format_ms(value: float | None) -> str:
    """Four significant digits, trailing zeros kept (`1.000`, `0.7071`, `12.50`)."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:.0f}"
    return f"{value:#.4g}"


def format_error_ms(value: float | None) -> str:
    """A standard error: two significant digits are all it has (`0.050`, `2.8`, `17`, `340`)."""
    if value is None:
        return "-"
    if value >= 9.95:
        return f"{value:.0f}"
    return f"{value:#.2g}"


def format_speedup(value: float | None) -> str:
    """Two decimals (`1.52x`), or two significant digits below 0.1 (`0.0013x`: the Triton
    interpreter against torch on the CPU), so that no speedup reads `0.00x`."""
    if value is None:
        return "-"
    return f"{value:.2f}x" if value >= 0.095 else f"{value:#.2g}x"


def format_verdict(verdict: VerdictSummary) -> str:
    return {"pass": "pass", "fail": "FAIL"}.get(verdict.status, "-")


def format_figure(value: float | None) -> str:
    """An error figure: two significant digits in scientific notation."""
    return "-" if value is None else f"{value:.1e}"


def verdict_notes(board: Leaderboard) -> list[tuple[LeaderboardEntry, str, str]]:
    """(entry, verdict label, reason) for every ranked entry that fails a verdict other than the
    ranking one: it ranks, and the reports say in words why the other verdict fails it."""
    return [
        (entry, VERDICT_WORDS[name], summary.reason)
        for entry in board.ranked()
        for name, summary in entry.verdicts.items()
        if summary.status == "fail"
    ]


RANKING_WORDS = {"geom": "geometric mean", "mean": "mean", "last": "last shape's mean"}


def board_title(board: Leaderboard) -> str:
    title = f"{board.task} leaderboard on {board.device or 'no device yet'}"
    title += f" ({board.mode + ' mode, ' if board.mode else ''}ranked by the {board.verdict} verdict)"
    title += f" [score: {RANKING_WORDS.get(board.ranking_by, board.ranking_by)} of the shapes' means"
    if board.gpumode_ranking_by is not None:
        words = RANKING_WORDS.get(board.gpumode_ranking_by, board.gpumode_ranking_by)
        title += f"; GPU MODE's score, the {words}, in the GPU MODE ms column"
    title += "]"
    if not board.exact_answer:
        title += " [no exact answer: only GPU MODE's verdict]"
    if board.reference_ms is not None:
        title += f": reference {format_ms(board.reference_ms)} ms"
    if board.judge_version < JUDGE_VERSION:
        title += f" [judge version {board.judge_version}, older than this harness's: the next tournament runs them again]"
    return title


def speedup_legend(board: Leaderboard) -> str:
    """What a `-` speedup of a ranked revision means, when one has it ("" otherwise)."""
    if not any(entry.speedup_note for entry in board.ranked()):
        return ""
    return (
        f"speedup -: {NO_REFERENCE_IN_RUN} (timed without the reference; "
        "`harness bench --force ID` times it again beside it)"
    )


VS_PARENT_STYLES = {"faster": "green", "slower": "red"}
PIPED_REASON_WIDTH = 100


def leaderboard_renderable(
    board: Leaderboard, *, wide: bool | None = False, width: int | None = None
) -> Group:
    """The terminal view: the title, the ranked table, why a ranked revision fails the other
    verdict, then the unranked revisions with status and reason.

    The ranked table shows rank, id, lineage and revision, score, speedup, the comparison with
    the parent and both verdicts; `wide` adds the author, a column per benchmark shape, the
    accuracy figures and the flags (None: wide when that table fits in `width`). Text from the
    store goes in as `Text`, so that brackets in a reason are not read as markup, with its
    control characters escaped (harness.report.text)."""
    if wide is None:
        wide = width is not None and _table_width(_ranked_table(board, wide=True)) <= width
    # `--wide` where the wide table cannot fit without cutting its numbers: the narrow table,
    # then the other columns in tables of their own, each keyed by rank and id (as pandas
    # prints a frame wider than the terminal).
    in_blocks = wide and width is not None and minimum_width(_ranked_table(board, wide=True)) > width
    title = board_title(board)
    parts: list[Table | Text] = [Text(escape_controls(title))]
    if board.ranked():
        # GPU MODE's own score only from 100 columns: under them it cut the verdicts (the JSON and
        # a wider terminal show it)
        gpumode = width is None or width >= 100
        parts.append(_ranked_table(board, wide=wide and not in_blocks, width=width, gpumode=gpumode))
        if in_blocks:
            for block in _detail_tables(board, width):
                parts.extend([Text(""), block])
        if speedup_legend(board):
            parts.append(Text(speedup_legend(board)))
    else:
        parts.append(Text("no revision has a score here yet"))
    for entry, label, reason in verdict_notes(board):
        parts.append(
            Text(
                f"submission {entry.submission_id} ({escape_controls(lineage_label(board, entry))}) "
                f"fails {label}: {escape_controls(reason)}"
            )
        )
    if board.unranked():
        parts.append(Text("\nnot ranked:"))
        entries = board.unranked()

        def unranked_table(hidden: tuple[str, ...]) -> Table:
            """Ids, names, statuses and verdicts whole; the reason wraps at its words (piped,
            unbounded: at PIPED_REASON_WIDTH rather than make a row of hundreds)."""
            with_author = wide and "author" not in hidden
            table = plain_table()
            table.add_column("id", justify="right", no_wrap=True)
            for header in ("revision", "status", "GPU MODE/\naccurate", *(["author"] if with_author else [])):
                table.add_column(header, no_wrap=True)
            table.add_column("reason", overflow="fold", max_width=None if width else PIPED_REASON_WIDTH)
            for entry in entries:
                table.add_row(
                    str(entry.submission_id),
                    Text(escape_controls(lineage_label(board, entry))),
                    Text(entry.status, style="" if entry.status in ("pass", NOT_RUN) else "bold red"),
                    _verdicts_text(entry.verdicts),
                    *([Text(escape_controls(entry.author))] if with_author else []),
                    Text(escape_controls(entry.reason)),
                )
            return table

        unranked, _hidden = fit_table(unranked_table, width, ("author",))
        parts.append(unranked)
    return Group(*parts)


def _table_width(table: Table) -> int:
    from rich.console import Console

    console = Console(width=10_000)
    return console.measure(table).maximum


def _ranked_table(board: Leaderboard, *, wide: bool, width: int | None = None, gpumode: bool = True) -> Table:
    shapes = board.shapes() if wide else []
    gpumode = gpumode and board.gpumode_ranking_by is not None
    ranked = plain_table()
    ranked.add_column("rank", justify="right", no_wrap=True)
    ranked.add_column("id", justify="right", no_wrap=True)
    # Wide enough for every `lineage rN`, so that narrow terminals wrap other columns first.
    names = max(
        (len(escape_controls(f"{entry.lineage} r{entry.revision}")) for entry in board.ranked()), default=8
    )
    ranked.add_column("revision", overflow="fold", min_width=min(names, 30))
    if wide:
        ranked.add_column("author", overflow="fold")
    ranked.add_column("score ms", justify="right", no_wrap=True)
    if gpumode:
        ranked.add_column("GPU MODE\nms", justify="right", no_wrap=True)
    for shape in shapes:
        ranked.add_column(
            "\n".join(f"{key} {parameter_text(value)}" for key, value in shape.items() if key != "seed"),
            justify="right",
        )
    ranked.add_column("speedup", justify="right", no_wrap=True)
    # "same within noise" on two lines in a narrow terminal (rich would crop a later column).
    ranked.add_column("vs parent", max_width=None if wide or width is None or width >= 100 else 11)
    ranked.add_column("GPU MODE/\naccurate", no_wrap=True)
    if wide:
        ranked.add_column("rel L2/\nerr÷scale", justify="right")
        ranked.add_column("flags")
    for entry in board.ranked():
        timings = {shape_key(timing.shape): timing for timing in entry.benchmarks}
        ranked.add_row(
            str(entry.rank),
            str(entry.submission_id),
            Text(escape_controls(lineage_label(board, entry))),
            *([Text(escape_controls(entry.author))] if wide else []),
            format_ms(entry.score_ms),
            *([format_ms(entry.gpumode_score_ms)] if gpumode else []),
            *[format_timing(timings.get(shape_key(shape))) for shape in shapes],
            format_speedup(entry.speedup_vs_reference),
            Text(entry.vs_parent or "-", style=VS_PARENT_STYLES.get(entry.vs_parent or "", "")),
            _verdicts_text(entry.verdicts),
            *(
                [
                    f"{format_figure(entry.accuracy.rel_l2)}/{format_figure(entry.accuracy.max_err_over_scale)}",
                    Text(escape_controls(", ".join(entry.flags))),
                ]
                if wide
                else []
            ),
            style="cyan" if entry.lineage == board.reference_lineage() else None,
        )
    return ranked


def _detail_tables(board: Leaderboard, width: int) -> list[Table]:
    """The wide table's other columns (author, one per benchmark shape, the accuracy figures,
    the flags) in as few tables as fit in `width` without cutting a number, each keyed by rank
    and id; a column too wide on its own (long flags) gets a table of its own and wraps."""
    ranked = board.ranked()
    timings = [{shape_key(timing.shape): timing for timing in entry.benchmarks} for entry in ranked]
    columns: list[tuple[str, dict, list]] = [
        ("author", {"no_wrap": True}, [Text(escape_controls(entry.author)) for entry in ranked])
    ]
    for shape in board.shapes():
        header = "\n".join(f"{key} {parameter_text(value)}" for key, value in shape.items() if key != "seed")
        cells = [format_timing(found.get(shape_key(shape))) for found in timings]
        columns.append((header, {"justify": "right", "no_wrap": True}, cells))
    figures = [
        f"{format_figure(entry.accuracy.rel_l2)}/{format_figure(entry.accuracy.max_err_over_scale)}"
        for entry in ranked
    ]
    columns.append(("rel L2/\nerr÷scale", {"justify": "right", "no_wrap": True}, figures))
    columns.append(
        ("flags", {"overflow": "fold"}, [Text(escape_controls(", ".join(e.flags))) for e in ranked])
    )

    def table(chosen: list[tuple[str, dict, list]]) -> Table:
        block = plain_table()
        block.add_column("rank", justify="right", no_wrap=True)
        block.add_column("id", justify="right", no_wrap=True)
        for header, options, _cells in chosen:
            block.add_column(header, **options)
        for row, entry in enumerate(ranked):
            block.add_row(
                str(entry.rank),
                str(entry.submission_id),
                *(cells[row] for _header, _options, cells in chosen),
                style="cyan" if entry.lineage == board.reference_lineage() else None,
            )
        return block

    blocks: list[list[tuple[str, dict, list]]] = [[]]
    for column in columns:
        if blocks[-1] and minimum_width(table([*blocks[-1], column])) > width:
            blocks.append([])
        blocks[-1].append(column)
    return [table(chosen) for chosen in blocks]


def _verdicts_text(verdicts: dict[VerdictName, VerdictSummary]) -> Text:
    """`pass/FAIL`: GPU MODE's verdict, then the accurate one; a failing one in red."""
    text = Text()
    for position, name in enumerate(VERDICTS):
        verdict = verdicts[name]
        text.append("/" if position else "")
        text.append(format_verdict(verdict), style="bold red" if verdict.status == "fail" else "")
    return text


def lineage_label(board: Leaderboard, entry: LeaderboardEntry) -> str:
    """`conv2d_x r3`, marked when it is the reference."""
    marker = " (reference)" if entry.lineage == board.reference_lineage() else ""
    return f"{entry.lineage} r{entry.revision}{marker}"


def format_timing(timing: ShapeTiming | None) -> str:
    if timing is None or timing.mean_ms is None:
        return "-"
    if timing.err_ms is None:
        return format_ms(timing.mean_ms)
    return f"{format_ms(timing.mean_ms)} ±{format_error_ms(timing.err_ms)}"
