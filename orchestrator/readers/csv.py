"""CSV logs, in either of two layouts:

- long: ``step,name,value`` per row (a header row is optional), a step's rows together;
- wide: a tracker's history export, one row per step and one column per metric, with a
  ``step`` or ``_step`` column (W&B's ``_step``, TensorBoard's and Comet's ``step``;
  ``Step``/``global_step`` too). Empty cells are absent figures; text cells are left out
  and named.

Detected by a ``.csv`` suffix, or a first line of comma-separated cells (three for the
long layout, a step column in the header for the wide one).
"""

from __future__ import annotations

import csv
from pathlib import Path

from gapwatch.orchestrator.readers.base import (
    STEP_ALIASES,
    Entry,
    LineReader,
    LogError,
    number,
    parse_step,
    register,
)

STEP_COLUMNS = ("_step", *(a for a in STEP_ALIASES if a != "_step"))
"""Header names taken as the step column of a wide CSV, in this order of preference (W&B's
``_step`` first: its exports may also hold a logged ``step``)."""


def _cells(text: str, where: str) -> list[str]:
    try:
        return [c.strip() for c in next(csv.reader([text]), [])]
    except csv.Error as exc:
        raise LogError(f"{where}: not a CSV row ({exc})") from None


@register("csv")
class Csv(LineReader):
    describe = "CSV: step,name,value rows, or a wide history export (a column per metric)"
    spans_lines = True

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        self.header: list[str] | None = None
        """A wide CSV's header (None: the long layout)."""
        self.step_col = 0

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if path.suffix.lower() == ".csv":
            return True
        first = next((ln for ln in head.splitlines() if ln.strip()), "")
        if first.lstrip().startswith(("{", "[")):
            return False
        try:
            cells = [c.strip() for c in next(csv.reader([first]), [])]
        except csv.Error:
            return False
        if len(cells) == 3 and all(cells):
            # a long step,name,value row: its header, or a step and a value (not a console
            # line with two commas: "Epoch:[1/1](12/500), Reward: 0.38, KL: 0.01")
            header = cells[0] in STEP_COLUMNS or cells[0].lower() == "step"
            return header or (number(cells[0]) is not None and number(cells[2]) is not None)
        return len(cells) >= 2 and any(c in STEP_COLUMNS for c in cells)

    def line(self, text: str, where: str) -> Entry | None:
        text = text.strip()
        if not text:
            return None
        cells = _cells(text, where)
        if not cells or all(not c for c in cells):
            return None
        if self.header is not None:
            return self._wide(cells, where)
        if [c.lower() for c in cells] == ["step", "name", "value"]:
            return None  # the long layout's header
        step_col = next((cells.index(c) for c in STEP_COLUMNS if c in cells), None)
        if step_col is not None and self._is_header(cells):
            if len(set(cells)) != len(cells):
                raise LogError(f"{where}: the header names a column twice ({','.join(cells)[:60]})")
            self.header, self.step_col = cells, step_col
            self.notes.append(f"steps: the {cells[step_col]!r} column")
            return None
        if cells[0].lower() == "step":
            raise LogError(
                f"{where}: a CSV header needs a step column ({', '.join(STEP_COLUMNS)}); "
                f"this header is {','.join(cells)[:60]}"
            )
        return self._long(cells, where)

    @staticmethod
    def _is_header(cells: list[str]) -> bool:
        return all(number(c) is None for c in cells if c)

    def _wide(self, cells: list[str], where: str) -> Entry | None:
        header = self.header or []
        if len(cells) != len(header):
            raise LogError(f"{where}: {len(cells)} cells under a header of {len(header)} columns")
        raw = cells[self.step_col]
        if not raw:
            return None  # a row without a step (a summary): nothing to place
        step = parse_step(raw, where)
        metrics: dict[str, float] = {}
        ignored: list[str] = []
        for i, (name, cell) in enumerate(zip(header, cells, strict=True)):
            if i == self.step_col or not cell or name in STEP_COLUMNS:
                continue
            v = number(cell)
            if v is None:
                ignored.append(name)
            else:
                metrics[name] = v
        return Entry(step, metrics, tuple(ignored), "csv")

    def _long(self, cells: list[str], where: str) -> Entry:
        if len(cells) != 3:
            raise LogError(
                f"{where}: expected 3 columns step,name,value, got {len(cells)} ({','.join(cells)[:60]})"
            )
        step = parse_step(cells[0], where)
        name, value = cells[1], cells[2]
        if not name:
            raise LogError(f"{where}: empty metric name")
        if not value:
            return Entry(step, {}, (name,), "csv")
        try:
            v = float(value)
        except ValueError:
            raise LogError(f"{where}: value {value!r} of {name!r} is not a number") from None
        return Entry(step, {name: v}, (), "csv")
