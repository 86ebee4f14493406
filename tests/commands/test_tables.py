"""The shared table helper: fit the width by dropping, then shortening; number formats."""

from __future__ import annotations

import io
import random

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from gpufleet.commands.tables import Column, draw_plain, fit_table, fmt_loss, fmt_size, labelled, print_table

COLUMNS = (
    Column("ID"),
    Column("NAME", shorten=True, min_width=8),
    Column("PATH"),  # never shortened
    Column("NOTE", drop=1, shorten=True),
    Column("EXTRA", drop=2),
)
ROW = ["1", "a-rather-long-training-name-of-forty-chars", "/data/checkpoints/run-0001/step-200",
       "some note " * 4, "x" * 20]


def _render(width: int, wide: bool = False) -> str:
    buf = io.StringIO()
    print_table(Console(file=buf, width=width, no_color=True, force_terminal=True, color_system=None), COLUMNS, [ROW],
                wide=wide)
    return buf.getvalue()


def test_drops_by_priority_then_shortens_but_never_cuts_the_path():
    out = _render(80)
    assert max(len(line) for line in out.splitlines()) <= 80, out
    header = next(line for line in out.splitlines() if "NAME" in line)
    assert "EXTRA" not in header and out.splitlines()[-1].startswith("(EXTRA")
    assert ROW[2] in out  # the path is whole
    narrow = _render(60)
    assert max(len(line) for line in narrow.splitlines()) <= 60, narrow
    assert ROW[2] in narrow and "…" in narrow and "NOTE" not in narrow.splitlines()[1]


def test_wide_keeps_every_column_whole():
    out = _render(80, wide=True)
    for cell in ROW:
        assert cell.strip() in out
    assert "hidden" not in out


def test_fit_reports_hidden_columns_least_important_first():
    fitted = fit_table(COLUMNS, [ROW], 70)
    assert fitted.hidden[0] == "EXTRA" and fitted.width <= 70


def _rich_width(table) -> int:
    console = Console(width=10_000)
    return Measurement.get(console, console.options.update(max_width=10_000), table).maximum


def _measured_by_rich(table: Table) -> Table:
    """The same table with no column's width given: each only capped, so rich measures every cell itself."""
    again = Table(title=table.title, title_justify=table.title_justify, box=table.box, pad_edge=table.pad_edge,
                  header_style=table.header_style)
    for c in table.columns:
        again.add_column(c.header, justify=c.justify, no_wrap=c.no_wrap, overflow=c.overflow, max_width=c.width)
    for row in zip(*(c._cells for c in table.columns), strict=True):
        again.add_row(*row)
    return again


def _drawn(table: Table, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), force_terminal=True, color_system="standard")
    console.print(table)
    return console.file.getvalue()


def test_the_counted_width_is_the_width_rich_measures():
    # fit_table counts widths instead of asking rich to measure (which renders every cell), and gives
    # them to rich; a rich that laid tables out otherwise would fail here, not fold a person's terminal.
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 8)
        columns = tuple(Column("H" * rng.randint(1, 8), drop=rng.choice([0, 1, 2]), shorten=rng.random() < 0.5,
                               min_width=rng.randint(1, 10)) for _ in range(n))
        rows = [[rng.choice([str, Text])("é" * rng.randint(0, 3) + "x" * rng.randint(0, 30) + "界" * rng.randint(0, 2)
                                         + rng.choice(["", "\t", "\x1b[2J", "\r\x07"]))
                 for _ in range(n)] for _ in range(rng.randint(0, 5))]
        for width in (rng.randint(10, 120), 10_000):
            fitted = fit_table(columns, rows, width, wide=width == 10_000, title=rng.choice([None, "host"]))
            measured = _measured_by_rich(fitted.table)
            assert fitted.width == _rich_width(measured), (columns, rows, width)
            # The widths given are the ones rich would have found: the table is drawn the same, cut alike.
            assert _drawn(fitted.table, max(width, fitted.width)) == _drawn(measured, max(width, fitted.width))


def _by_rich(fitted, width: int, color_system: str | None, no_color: bool) -> str:
    console = Console(width=max(width, fitted.width), file=io.StringIO(), force_terminal=True,
                      color_system=color_system, no_color=no_color, markup=False)
    console.print(fitted.table)
    return console.file.getvalue()


def test_a_plain_table_is_drawn_as_rich_draws_it_character_for_character():
    # A listing at a terminal is drawn by draw_plain (rich's layout and rendering were most of its
    # time); what it writes must be what rich writes: the same cuts, padding, rule, edges and styles.
    rng = random.Random(11)
    drawn_here = 0
    for case in range(600):
        n = rng.randint(1, 8)
        columns = tuple(Column("H" * rng.randint(1, 8), drop=rng.choice([0, 1, 2]), shorten=rng.random() < 0.5,
                               min_width=rng.randint(1, 10), justify=rng.choice(["left", "right", "center"]))
                        for _ in range(n))
        special = case % 5 == 0  # now and then a cell only rich may draw
        rows = [[rng.choice(["", "x" * rng.randint(0, 30), "auto×2", "0/100", " a b ", "ab-" * rng.randint(1, 9)])
                 for _ in range(n)] for _ in range(rng.randint(0, 6))]
        if special and rows:
            rows[0][0] = rng.choice([Text("styled", style="red"), "wide 界", "two\nlines", "e\u0301"])
        width = rng.randint(10, 120)
        wide = rng.random() < 0.2
        fitted = fit_table(columns, rows, width, wide=wide)
        for color_system, no_color in ((None, False), ("standard", False), ("truecolor", True)):
            mine = draw_plain(fitted, color=color_system is not None)
            if mine is None:
                assert special or not fitted.keep, (columns, rows)  # every column dropped: rich draws that
                continue
            drawn_here += 1
            assert mine == _by_rich(fitted, width, color_system, no_color), (columns, rows, width, wide)
    assert drawn_here > 1200


def test_a_listing_prints_the_same_lines_either_way():
    rows = [["1", "a-rather-long-training-name-of-forty-chars", "/data/checkpoints/run-0001/step-200", "n", "x"],
            ["2", "b", "/p", "some note " * 4, "y" * 20]]
    for width in (40, 60, 80, 200):
        fitted = fit_table(COLUMNS, rows, width)
        buf = io.StringIO()
        console = Console(file=buf, width=width, force_terminal=True, color_system="standard", markup=False)
        print_table(console, COLUMNS, rows)
        by_rich = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="standard")
        by_rich.print(fitted.table)  # at 40 columns too narrow even when cut: rich squeezes it, as before
        assert buf.getvalue().startswith(by_rich.file.getvalue()), buf.getvalue()
    # A styled cell is drawn by rich, styles and all.
    buf = io.StringIO()
    print_table(Console(file=buf, width=80, force_terminal=True, color_system="standard"), COLUMNS[:2],
                [["1", Text("failed", style="red")]])
    assert "\x1b[31mfailed" in buf.getvalue()


def test_sizes_are_binary_and_losses_have_four_significant_digits():
    assert fmt_size(80 * 2**30) == "80.0 GiB"
    assert fmt_size(572 * 2**20) == "572 MiB"
    assert fmt_size(1536) == "1.5 KiB"
    assert fmt_size(0) == "0 B" and fmt_size(None) == "-"
    # 1000 to 1023 of a unit are whole numbers, not "1e+03 MiB" (recommend's total for sae).
    assert fmt_size(1000 * 2**20) == "1000 MiB" and fmt_size(1023.4 * 2**20) == "1023 MiB"
    assert fmt_loss(0.123456789012345) == "0.1235"
    assert fmt_loss(1.23456789e-05) == "1.235e-05"
    assert fmt_loss(None) == "-"


def test_cells_titles_and_messages_are_text_never_markup():
    # Even on a console that reads markup: a cell holds what a member wrote.
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True, color_system="standard")
    print_table(console, COLUMNS[:2], [["[link=https://evil.example]x[/link]", "[bold]y[/]"]], title="[red]t[/]")
    console.print(labelled("error:", "no training [b]z[/b]"))
    # Nor do a member's control characters reach the terminal: an escape sequence (a link, clearing the
    # screen), a carriage return that would draw over the line, a bell; each is one visible character.
    print_table(console, COLUMNS[:1],
                [["a\x1b]8;;https://evil.example\x1b\\b\re\x07"], [Text("c\x1b[2Jd", style="red")]])
    console.print(labelled("error:", "f\x1b[2Jg"))
    out = buf.getvalue()
    for written in ("[link=https://evil.example]x[/link]", "[bold]y[/]", "[red]t[/]", "no training [b]z[/b]",
                    "a\ufffd]8;;https://evil.example\ufffd\\b\ufffde\ufffd", "c\ufffd[2Jd", "f\ufffd[2Jg"):
        assert written in out, out
    assert "\x1b]8;" not in out and "\x1b[2J" not in out and "\r" not in out and "\x07" not in out
    # The label keeps its style.
    assert "\x1b[1;31merror:" in out


def test_a_command_s_console_never_paints_parts_of_words(monkeypatch):
    import io

    from gpufleet.commands.tables import make_console

    monkeypatch.setenv("FORCE_COLOR", "1")  # a colour terminal, which is where rich highlights
    monkeypatch.setenv("COLORTERM", "truecolor")
    console = make_console()
    console.file = io.StringIO()
    console.print("training abc on cuda:0, cuda:1 (2 GPUs) from 10.0.0.1")
    assert console.file.getvalue().strip() == "training abc on cuda:0, cuda:1 (2 GPUs) from 10.0.0.1"


def test_a_finished_script_that_counted_from_zero_shows_all_its_steps_done() -> None:
    from gpufleet.commands.tables import progress_text

    assert progress_text({"step": 599, "max_steps": 600, "status": "running"}) == "599/600"
    assert progress_text({"step": 599, "max_steps": 600, "status": "succeeded"}) == "600/600"
    assert progress_text({"step": 300, "max_steps": 600, "status": "succeeded"}) == "300/600"
    assert progress_text({"step": 600, "max_steps": 600, "status": "succeeded"}) == "600/600"
    assert progress_text({"step": 12, "max_steps": None, "status": "failed"}) == "12/?"
