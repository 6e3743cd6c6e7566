"""A run's metric history as a log file that ``gapwatch replay`` reads back.

``.jsonl``: one object per step, ``{"step": n, name: value, ...}``; non-finite values are
written as the JSON tokens ``NaN`` / ``Infinity`` / ``-Infinity``, which Python's
``json`` reads back. ``.csv``: a ``step,name,value`` header, then one row per metric
(values ``nan`` / ``inf`` / ``-inf`` where not finite).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import StoreError

SUFFIXES = (".jsonl", ".csv")


def check_target(path: str | Path, *, overwrite: bool = False) -> Path:
    """The output path, or a StoreError saying what is wrong with it (an existing file is
    only replaced with ``overwrite``)."""
    out = Path(path)
    if out.suffix.lower() not in SUFFIXES:
        raise StoreError(f"cannot export to {out}: name the file .jsonl or .csv")
    if not out.parent.exists():
        raise StoreError(f"directory {out.parent} does not exist: create it first")
    if out.exists() and not overwrite:
        raise StoreError(f"{out} exists: pass --force to replace it, or choose another name")
    return out


def jsonl_lines(history: Sequence[dict[str, Any]]) -> Iterator[str]:
    """The ``.jsonl`` log of ``history`` (``Store.history`` rows), one line per step."""
    for row in history:
        yield json.dumps(row) + "\n"


def write_log(history: Sequence[dict[str, Any]], out: Path) -> int:
    """Write ``history`` (``Store.history`` rows) to ``out``; returns the step count."""
    with out.open("w", encoding="utf-8", newline="") as fh:
        if out.suffix.lower() == ".jsonl":
            fh.writelines(jsonl_lines(history))
        else:
            w = csv.writer(fh)
            w.writerow(["step", "name", "value"])
            for row in history:
                step = row["step"]
                for name, value in row.items():
                    if name != "step":
                        w.writerow([step, name, "" if value is None else repr(float(value))])
    return len(history)
