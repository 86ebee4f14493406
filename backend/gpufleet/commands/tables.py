"""Tables that fit the terminal, and the number formats every command shares.

A command describes its columns once, with a priority: at the terminal's
width the least important columns are dropped first, then the columns that may
be shortened are cut with ``…``, and a footer says what ``--wide`` would show.
Paths are never put in a shortenable column: a cut path cannot be pasted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from rich.table import Table

WideOpt = Annotated[bool, typer.Option("--wide", help="show every column, however wide the table gets")]
# Every command that talks to a server takes it the same way (gpufleet.client.Client): --server, else
# $GPUFLEET_SERVER, else this machine's server through its Unix socket (whatever port it listens on).
SERVER_HELP = ("server URL (default $GPUFLEET_SERVER, else this machine's server through its socket, "
               "else http://127.0.0.1:8000)")
ServerOpt = Annotated[str | None, typer.Option("--server", envvar="GPUFLEET_SERVER", show_envvar=False,
                                               help=SERVER_HELP)]

Cell = str | Text


@dataclass(frozen=True)
class Column:
    header: str
    # 0: always shown; higher numbers are dropped first when the table is too wide.
    drop: int = 0
    # May be cut with "…" down to ``min_width`` characters (never for paths).
    shorten: bool = False
    min_width: int = 6
    justify: Literal["left", "right", "center"] = "left"


@dataclass
class Fitted:
    """A table fitted to a width: the columns kept, each one's width, and the rows (text cells)."""

    columns: Sequence[Column]
    rows: list[list[Text]]
    keep: list[int]
    widths: dict[int, int]  # by column index, for the columns kept
    title: str | None
    hidden: list[str]
    width: int

    @cached_property
    def table(self) -> Table:
        """The table as rich draws it (built only when asked: a plain one is drawn by :func:`draw_plain`)."""
        from rich import box
        from rich.table import Table

        # Cells and titles are text, never console markup: they hold what members wrote (names, reasons),
        # and "[link=…]" in a training's name must not become a link in an admin's terminal.
        table = Table(title=_plain(self.title) if self.title is not None else None, title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False, header_style="bold")
        for i in self.keep:
            c = self.columns[i]
            # Each column's width is known (its widest cell, cut to its limit): given, rich does not
            # measure every cell again by rendering it, most of a listing's time.
            table.add_column(c.header, justify=c.justify, no_wrap=True, overflow="ellipsis", width=self.widths[i])
        for row in self.rows:
            table.add_row(*(row[i] for i in self.keep))  # fit_table made each cell text already
        return table


def _fitted(columns: Sequence[Column], rows: list[list[Text]], keep: list[int], limits: dict[int, int],
            title: str | None, hidden: list[str], cells: dict[int, int]) -> Fitted:
    widths = {i: min(cells[i], limits.get(i, cells[i])) for i in keep}
    return Fitted(columns, rows, keep, widths, title, hidden, natural_width(cells, keep, limits))


def _single_width(text: str) -> bool:
    return "\n" not in text and cell_len(text) == len(text)


def _fit_cell(text: str, width: int, justify: str) -> str:
    """One cell as rich draws it in a column of ``width``: cut with "…" (ellipsis overflow) and justified,
    its trailing blanks dropped first where it is justified right or centred (as rich's ``Lines.justify``)."""
    if justify != "left":
        text = text.rstrip()
    if len(text) > width:
        text = text[:width - 1] + "…"
    excess = width - len(text)
    if justify == "right":
        return " " * excess + text
    if justify == "center":
        return " " * (excess // 2) + text + " " * (excess - excess // 2)
    return text + " " * excess


def draw_plain(fitted: Fitted, *, color: bool) -> str | None:
    """The lines rich draws for ``fitted.table`` (box SIMPLE_HEAD, no padding at the edges, bold headers),
    drawn here as strings: rich lays out and renders every cell as segments, most of what a listing costs
    at a terminal. None where only rich can draw it: a title, a styled cell, a line break in a cell, a
    character that is not one column wide. ``color``: whether the console writes styles (bold) at all.
    tests/commands/test_tables.py holds it to rich's own drawing, character for character."""
    if fitted.title is not None or not fitted.keep:
        return None
    columns = [fitted.columns[i] for i in fitted.keep]
    widths = [fitted.widths[i] for i in fitted.keep]
    if min(widths) < 1 or not all(_single_width(c.header) for c in columns):
        return None
    body = []
    for row in fitted.rows:
        cells = [row[i] for i in fitted.keep]
        if any(cell.spans or cell.style or not _single_width(cell.plain) for cell in cells):
            return None
        body.append(" " + "   ".join(_fit_cell(cell.plain, w, c.justify)
                                     for cell, w, c in zip(cells, widths, columns, strict=True)) + " ")

    def bold(text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if color and text else text

    last = len(columns) - 1
    head = " " + " ".join((bold(" ") if j else "") + bold(_fit_cell(c.header, w, c.justify))
                          + (bold(" ") if j < last else "")
                          for j, (c, w) in enumerate(zip(columns, widths, strict=True))) + " "
    blank = " " * fitted.width
    rule = " " + "─" * (fitted.width - 2) + " "
    return "\n".join([blank, head, rule, *body, blank]) + "\n"


# Control characters (escape sequences, a bell, a carriage return) in what the server sends would act on
# the reader's terminal: each shows as one replacement character, so widths and styles stay as counted.
_CONTROLS = {c: "\ufffd" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}
_CONTROLS[0x09] = " "


def printable(text: str) -> str:
    """``text`` with every control character but the line break made harmless (a tab is a space)."""
    return text.translate(_CONTROLS)


def _plain(cell: Cell) -> Text:
    """A cell as text: a ``str`` is shown as written (a styled ``Text`` keeps its styles), never as
    markup, and its control characters cannot reach the terminal."""
    if not isinstance(cell, Text):
        return Text(printable(cell))
    clean = printable(cell.plain)
    if clean == cell.plain:
        return cell
    cell = cell.copy()
    cell.plain = clean  # as long as before: the styles' spans still fit
    return cell


def natural_width(cells: dict[int, int], keep: Sequence[int], limits: dict[int, int]) -> int:
    """The width rich gives the table ``_build`` makes of the columns ``keep`` (``cells``: each column's
    widest cell, header included): each column at that width cut to its limit, one space of padding
    on either side of a column but the table's first and last, a divider between columns and an edge
    on either side. Counting it costs nothing, where rich measures by rendering every cell: most of a
    listing's time. tests/commands/test_tables.py holds it to rich's own measure."""
    return sum(min(cells[i], limits.get(i, cells[i])) for i in keep) + 3 * len(keep) - 1 if keep else 1


def _cell_width(cell: Cell) -> int:
    text = cell if isinstance(cell, str) else cell.plain
    return max((cell_len(line) for line in text.split("\n")), default=0)


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int, *,
              wide: bool = False, title: str | None = None) -> Fitted:
    """The table for ``width`` columns: drop by priority, then shorten; ``wide`` keeps all."""
    keep = list(range(len(columns)))
    limits: dict[int, int] = {}
    rows = [[_plain(c) for c in row] for row in rows]  # measured as they will be drawn
    cells = {i: max([_cell_width(c.header)] + [_cell_width(r[i]) for r in rows]) for i, c in enumerate(columns)}
    if wide:
        return _fitted(columns, rows, keep, limits, title, [], cells)
    widths = {i: w for i, w in cells.items() if columns[i].shorten}

    def narrowest(keep: list[int]) -> int:
        # The width with every shortenable column cut to its minimum.
        return natural_width(cells, keep, {i: min(w, columns[i].min_width) for i, w in widths.items()})

    # Drop the least important columns (the last of equals first) only while
    # shortening alone could not make the table fit.
    droppable = sorted((i for i, c in enumerate(columns) if c.drop > 0), key=lambda i: (-columns[i].drop, -i))
    hidden: list[str] = []
    while natural_width(cells, keep, limits) > width and droppable and narrowest(keep) > width:
        i = droppable.pop(0)
        keep.remove(i)
        hidden.append(columns[i].header)
    # Then shorten the widest shortenable column, a character at a time.
    excess = natural_width(cells, keep, limits) - width
    left = {i: w for i, w in widths.items() if i in keep}
    while excess > 0 and left:
        i = max(left, key=lambda k: left[k])
        if left[i] <= columns[i].min_width:
            del left[i]
            continue
        left[i] -= 1
        limits[i] = left[i]
        excess -= 1
    return _fitted(columns, rows, keep, limits, title, hidden, cells)


def print_tsv(console: Console, headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> None:
    """One line per row, cells separated by tabs, the headers first: what a script reads (`| cut -f2`)."""
    def plain(cell: Cell) -> str:
        text = cell.plain if isinstance(cell, Text) else str(cell)
        return " ".join(printable(text).split())  # a tab or a line break inside a cell would split it

    for row in (headers, *rows):
        console.file.write("\t".join(plain(c) for c in row) + "\n")
    console.file.flush()


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *,
                wide: bool = False, title: str | None = None) -> None:
    """Print the table fitted to ``console``'s width (all of it with ``wide``) on a terminal; piped or
    redirected, every list is tab-separated lines instead (:func:`print_tsv`), its title on stderr."""
    if not console.is_terminal:
        if title:
            Console(stderr=True, soft_wrap=True, markup=False).print(title, highlight=False)
        print_tsv(console, [c.header for c in columns], rows)
        return
    fitted = fit_table(columns, rows, console.width, wide=wide, title=title)
    drawn = None
    if (wide or fitted.width <= console.width) and not (console.record or console.legacy_windows):
        drawn = draw_plain(fitted, color=console.color_system is not None)
    if drawn is not None:
        if not console.quiet:
            console.file.write(drawn)
            console.file.flush()
    elif wide and fitted.width > console.width:
        # Wider than the terminal on purpose: let the terminal scroll, never fold cells.
        Console(width=fitted.width, file=console.file, force_terminal=console.is_terminal,
                no_color=console.no_color, markup=False).print(fitted.table)
    else:
        console.print(fitted.table)
    if fitted.hidden:
        console.print(Text(f"({', '.join(fitted.hidden)} hidden to fit {console.width} columns; --wide shows all)",
                           style="dim"),
                      highlight=False)


def print_lines(console: Console, rows: Sequence[Sequence[str]], *, label: bool = False,
                whole: Sequence[str] = ()) -> None:
    """Rows of cells whose last cell may be long: on a terminal the last cell folds
    under itself (a hanging indent), never back to column 0; elsewhere each row is
    one line. ``label``: the first cell is a bold, right-aligned label. A row whose
    first cell is in ``whole`` (a path) is never folded, so it can be copied."""
    rows = [[printable(c) for c in row] for row in rows]
    widths = [max(Text(r[i]).cell_len for r in rows) for i in range(len(rows[0]) - 1)] if rows else []

    def line(row: Sequence[str]) -> Text:
        cells = [(f"{c:>{w}}" if label and i == 0 else f"{c:<{w}}", "bold" if label and i == 0 else "")
                 for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        return Text.assemble(*[part for cell in cells for part in (cell, " ")], row[-1])

    if not console.is_terminal:
        for row in rows:
            console.print(line(row), highlight=False, soft_wrap=True)
        return
    from rich.table import Table

    grid = None
    for row in rows:
        if row[0] in whole:
            if grid is not None:
                console.print(grid)
                grid = None
            console.print(line(row), highlight=False, soft_wrap=True)
            continue
        if grid is None:
            grid = Table.grid(padding=(0, 1))
            for i, w in enumerate(widths):
                grid.add_column(justify="right" if label and i == 0 else "left", min_width=w, no_wrap=True,
                                style="bold" if label and i == 0 else None)
            grid.add_column(overflow="fold")
        grid.add_row(*row)
    if grid is not None:
        console.print(grid)


def labelled(label: str, message: object, *, style: str = "bold red") -> Text:
    """``label message`` with the label styled. The message is shown as written, never read as console
    markup: it holds what the server or a member wrote ("[link=…]" in a name stays those characters)."""
    return Text.assemble((label, style), " ", printable(str(message)))


def make_console(stderr: bool = False) -> Console:
    """The console a command prints on: lines wrap at the terminal's width, and only on a terminal.

    Written to a file or a pipe, rich would fold every line at 80 columns (its
    default width there), cutting a URL or an id in two for whoever reads the
    log or greps it. Tables still fit the console's width (``--wide`` shows all).
    """
    # What it prints holds members' words: styles are Text's, never markup, and never rich's guesses (its
    # highlighter painted "cuda:0" as "cu" + a bold "da:0", taking it for a key: value pair).
    console = Console(stderr=stderr, markup=False, highlight=False)
    console.soft_wrap = not console.is_terminal
    return console


def fmt_size(n: float | None) -> str:
    """Bytes in binary units, one decimal below 100: ``80.0 GiB``, ``572 MiB``, ``1.5 KiB``, ``0 B``."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    if unit == "B":
        return f"{int(value)} B"
    return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.1f} {unit}"


def fmt_loss(x: float | None) -> str:
    """A loss to four significant digits (``0.01235``, ``1.235e-05``); ``-`` when none."""
    return "-" if x is None else f"{x:.4g}"


def progress_text(t: dict[str, Any]) -> str:
    """``step/total`` as a person reads it: a finished run that counted its steps from 0 (``range(N)``)
    reports ``N-1`` last, and is ``N/N``, not one short."""
    step, total = t.get("step") or 0, t.get("max_steps")
    if t.get("status") == "succeeded" and total and step == total - 1:
        step = total
    return f"{step}/{total or '?'}"
