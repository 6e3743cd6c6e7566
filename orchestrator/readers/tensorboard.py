"""TensorBoard event files (``events.out.tfevents.*``: TRL/transformers
``report_to="tensorboard"``, verl's ``tensorboard`` logger), a file or a log folder (its
event files, in sub-folders too), read with the ``tensorboard`` package's
``EventAccumulator`` (no TensorFlow): scalar summaries, and scalar-shaped tensor
summaries (TF2's). Each tag is a metric; a tag's figures are merged across the files of
one folder by step. A log folder holding several runs (event files in several
sub-folders) is read for its latest run, named in the notes.

Detected by an ``events.out.tfevents.*`` file name, or a folder holding one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gapwatch.orchestrator.readers.base import (
    Entry,
    LogError,
    WholeReader,
    files_signature,
    register,
)

PATTERN = "events.out.tfevents.*"
INSTALL = "pip install tensorboard"


def event_files(path: Path) -> list[Path]:
    """The event files of ``path`` (itself, or every one under the folder), by name."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob(PATTERN) if p.is_file())


def _accumulator() -> Any:
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        raise LogError(
            f"reading TensorBoard event files needs the tensorboard package: {INSTALL}"
        ) from None
    return EventAccumulator


@register("tensorboard")
class TensorBoard(WholeReader):
    describe = "TensorBoard event files (events.out.tfevents.*), a file or a log folder"

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if path.is_dir():
            return next(iter(path.rglob(PATTERN)), None) is not None
        return path.name.startswith("events.out.tfevents.")

    def signature(self, path: Path) -> tuple[Any, ...]:
        return files_signature(path, PATTERN) if path.is_dir() else files_signature(path)

    def entries(self, path: Path) -> list[Entry]:
        acc_cls = _accumulator()
        files = event_files(path)
        if not files:
            raise LogError(f"{path}: no TensorBoard event files ({PATTERN}) in it")
        runs: dict[Path, list[Path]] = {}
        for f in files:
            runs.setdefault(f.parent, []).append(f)
        if len(runs) > 1:  # a log folder of several runs: one run's folder, the latest
            latest = max(runs, key=lambda d: max(f.stat().st_mtime for f in runs[d]))
            files = runs[latest]
            note = f"{len(runs)} runs under {path}: read the latest, {latest.relative_to(path)}"
            if note not in self.notes:
                self.notes.append(note)
        steps: dict[int, dict[str, float]] = {}
        for f in files:
            acc = acc_cls(str(f), size_guidance={"scalars": 0, "tensors": 0})
            try:
                acc.Reload()
            except Exception as exc:  # noqa: BLE001 - a corrupt record: said in one line
                raise LogError(f"{f}: not a readable event file ({type(exc).__name__})") from None
            tags = acc.Tags()
            for tag in tags.get("scalars", []):
                for ev in acc.Scalars(tag):
                    steps.setdefault(int(ev.step), {})[tag] = float(ev.value)
            for tag in tags.get("tensors", []):
                for ev in acc.Tensors(tag):
                    value = _scalar(ev.tensor_proto)
                    if value is not None:
                        steps.setdefault(int(ev.step), {}).setdefault(tag, value)
        return [Entry(s, m, (), "tensorboard") for s, m in sorted(steps.items()) if s >= 0]


def _scalar(proto: Any) -> float | None:
    """A tensor summary's value if it is one number (text and histograms: None)."""
    from tensorboard.util import tensor_util

    try:
        arr = tensor_util.make_ndarray(proto)
    except Exception:  # noqa: BLE001 - not a numeric tensor
        return None
    if arr.size != 1 or arr.dtype.kind not in "fiu":
        return None
    return float(arr.reshape(()))
