"""JSON lines, one step per line: ``{"step": N, "<metric>": value, ...}``, and verl's file
logger (``trainer.logger=[..., "file"]``), which appends ``{"step": N, "data": {...}}``
per step (other top-level keys such as ``elapsed_seconds`` are ignored).

Detected by a ``.jsonl`` suffix, or a first line that opens a JSON object (``{"``). Numbers are kept
(``NaN`` too); strings, nulls, lists and dicts are left out and named. A line that is not
one JSON object with a ``step`` is an error naming the line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson

from orchestrator.readers.base import Entry, LineReader, LogError, parse_step, register

_OBJECT = re.compile(r'\s*\{\s*["}]')
"""A JSON object's start (a printed Python dict opens with ``{'`` instead)."""
FLAT_EXAMPLE = '{"step": 1, "critic/score/mean": 0.5}'


def loads(text: str | bytes) -> Any:
    """orjson (several times faster: replay reads every line); Python's json for what
    orjson refuses but Python writes, the ``NaN`` / ``Infinity`` tokens."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def json_entry(obj: Any, text: str, where: str) -> Entry:
    """The entry of one decoded JSON object (flat, or verl's ``{"step", "data"}``)."""
    if not isinstance(obj, dict):
        raise LogError(f"{where}: expected a JSON object like {FLAT_EXAMPLE}, got {text[:40]}")
    if "step" not in obj:
        raise LogError(f'{where}: no "step" key; each line needs one, like {FLAT_EXAMPLE}')
    step = parse_step(obj["step"], where)
    verl = isinstance(obj.get("data"), dict)
    raw = obj["data"] if verl else obj
    # json gives floats, ints, bools, None, str, lists, dicts: keep the numbers (not bools)
    metrics = {k: v for k, v in raw.items() if type(v) is float and k != "step"}
    if len(metrics) < len(raw) - (0 if verl else 1):
        for k, v in raw.items():
            if type(v) is int and k != "step":
                metrics[k] = float(v)
        ignored = tuple(k for k in raw if k not in metrics and (verl or k != "step"))
    else:
        ignored = ()
    return Entry(step, metrics, ignored, "verl" if verl else "jsonl")


@register("jsonl")
class JsonLines(LineReader):
    describe = 'JSON lines {"step": N, ...}, verl\'s file logger {"step": N, "data": {...}}'

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return path.suffix.lower() == ".jsonl" or _OBJECT.match(head) is not None

    def line(self, text: str, where: str) -> Entry | None:
        text = text.strip()
        if not text:
            return None
        try:
            obj = loads(text)
        except json.JSONDecodeError as e:
            raise LogError(
                f"{where}: not valid JSON ({e.msg} at column {e.colno}); each line must be "
                f"one JSON object like {FLAT_EXAMPLE}"
            ) from None
        return json_entry(obj, text, where)
