"""A Jupyter notebook's cell outputs (a Colab/Unsloth training notebook saved with its
outputs): the text its cells printed, read by the console readers (``console_dicts``,
``verl_console``, ``keyvalue``, whichever finds figures), and the training table
transformers' notebook progress display draws (``Step | Training Loss | reward | ...``,
as HTML or as text), whose ``Step`` column is the step. ``Training Loss`` is read as
``loss`` and ``Validation Loss`` as ``eval_loss`` (the names the trainer logged).

Detected by a ``.ipynb`` suffix, or a JSON object with a ``cells`` list.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

# get: the console readers by name (the package registers every reader on import)
from gapwatch.orchestrator.readers.base import (
    Entry,
    LineReader,
    LogError,
    ReadOptions,
    WholeReader,
    get,
    number,
    register,
    strip_ansi,
)
from gapwatch.orchestrator.readers.trl_state import read_json, whole_json

RENAMED = {"Training Loss": "loss", "Validation Loss": "eval_loss"}
_SLASH = re.compile(r"\s*/\s*")


def column_name(header: str) -> str:
    """The logged name behind a training table's column: the notebook's table draws
    ``completions/clipped_ratio`` as ``completions / clipped_ratio`` (so the name maps would
    miss it), and ``Training Loss`` for ``loss``."""
    name = _SLASH.sub("/", header.strip())
    return RENAMED.get(name, name)


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else value if isinstance(value, str) else ""


def outputs(doc: Any) -> tuple[list[str], list[str]]:
    """The notebook's printed text and its HTML outputs, in cell order."""
    texts: list[str] = []
    html: list[str] = []
    cells = doc.get("cells") if isinstance(doc, dict) else None
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict):
            continue
        for out in cell.get("outputs") or []:
            if not isinstance(out, dict):
                continue
            if out.get("output_type") == "stream":
                texts.append(_text(out.get("text")))
            data = out.get("data")
            if isinstance(data, dict):
                if "text/html" in data:
                    html.append(_text(data["text/html"]))
                elif "text/plain" in data:
                    texts.append(_text(data["text/plain"]))
    return texts, html


class _Tables(HTMLParser):
    """Every HTML table as rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self.tables:
            self.tables[-1].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


Table = tuple[tuple[str, ...], list[Entry]]


def table_entries(rows: list[list[str]]) -> list[Table]:
    """The training tables (a header with a ``Step`` column, numeric rows) in ``rows``,
    each as its header and its entries."""
    out: list[Table] = []
    header: list[str] | None = None
    for cells in rows:
        if "Step" in cells and all(number(c) is None for c in cells):
            header = cells
            out.append((tuple(cells), []))
            continue
        if header is None or len(cells) != len(header):
            continue
        step = number(cells[header.index("Step")])
        if step is None or step != int(step) or step < 0:
            continue
        metrics = {
            column_name(name): x
            for name, cell in zip(header, cells, strict=True)
            if name != "Step" and (x := number(cell)) is not None
        }
        out[-1][1].append(Entry(int(step), metrics, (), "ipynb"))
    return [t for t in out if t[1]]


_SPLIT = re.compile(r"\s*\|\s*|\t|\s{2,}")


def text_tables(text: str) -> list[list[str]]:
    """Rows of a table printed as text (``Step | Training Loss | ...``, tab- or
    space-aligned), from its header line on."""
    rows: list[list[str]] = []
    on = False
    for line in text.splitlines():
        cells = [c for c in _SPLIT.split(line.strip()) if c]
        if "Step" in cells and len(cells) >= 2:
            on = True
        if on and cells and not set(line.strip()) <= set("|-+: "):
            rows.append(cells)
    return rows


@register("ipynb")
class Notebook(WholeReader):
    describe = "a Jupyter notebook's outputs: printed logs and the Step | Training Loss table"

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if path.suffix.lower() == ".ipynb":
            return True
        doc = whole_json(head, path)
        return isinstance(doc, dict) and isinstance(doc.get("cells"), list)

    def entries(self, path: Path) -> list[Entry]:
        doc = read_json(path, "a Jupyter notebook")
        if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
            raise LogError(f"{path}: not a Jupyter notebook (no cells list)")
        texts, html = outputs(doc)
        tables: list[Table] = []
        for h in html:
            parser = _Tables()
            parser.feed(h)
            for t in parser.tables:
                tables += table_entries(t)
        for text in texts:
            tables += table_entries(text_tables(strip_ansi(text)))
        printed = "".join(texts)
        best: list[Entry] = []
        for name in ("console_dicts", "verl_console", "keyvalue"):
            reader = get(name, self.options or ReadOptions())
            assert isinstance(reader, LineReader)
            got = []
            for i, line in enumerate(printed.splitlines(), start=1):
                try:
                    e = reader.line(line, f"{path} output line {i}")
                except LogError:
                    continue
                if e is not None and e.metrics:
                    got.append(e)
            if len(got) > len(best):
                best, how = got, [*reader.notes, f"from the notebook's printed {name}"]
        # a table drawn again as training went on repeats its header: one run's table; of
        # several runs (an SFT warm-up before GRPO), the one with the most columns, else
        # the last
        runs: dict[tuple[str, ...], list[Entry]] = {}
        for header, got in tables:
            runs.setdefault(header, []).extend(got)
        if runs:
            order = list(runs)
            header = max(order, key=lambda h: (len(h), order.index(h)))
            picked = _merged(runs[header])
            if len(picked) >= len(best):
                note = "from the notebook's training table (its Step column)"
                if len(runs) > 1:
                    note += f"; of its {len(runs)} tables, the one of {len(header)} columns"
                self.notes[:] = [note]
                return picked
        if best:
            self.notes[:] = how
        return best


def _merged(entries: list[Entry]) -> list[Entry]:
    """Table rows in step order, each step once (a table redrawn as training went on
    repeats its earlier rows; the last drawing's figures win)."""
    by_step: dict[int, dict[str, float]] = {}
    for e in entries:
        by_step.setdefault(e.step, {}).update(e.metrics)
    return [Entry(s, m, (), "ipynb") for s, m in sorted(by_step.items())]
