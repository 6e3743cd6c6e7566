"""MLflow's local file store (``mlruns/``, ``MLFLOW_TRACKING_URI=file:...``): a run's
``metrics/<key>`` files, one ``timestamp value step`` line per logged figure (keys with
``/`` are sub-folders), read directly (no MLflow needed).

The path may be a run folder (it has ``metrics/`` and ``meta.yaml``), its ``metrics/``
folder, an experiment folder or ``mlruns/`` itself holding one run (holding several:
the most recently written one, named in the notes). Figures are merged by step.

Detected by that layout.
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


def _is_run(p: Path) -> bool:
    return (p / "metrics").is_dir() and (p / "meta.yaml").is_file()


def runs_under(path: Path) -> list[Path]:
    """The run folders at ``path`` (a run, its metrics folder, an experiment, mlruns)."""
    if path.name == "metrics" and _is_run(path.parent):
        return [path.parent]
    if _is_run(path):
        return [path]
    found = [p for p in path.glob("*") if p.is_dir() and _is_run(p)]
    found += [p for p in path.glob("*/*") if p.is_dir() and _is_run(p)]
    return found


def _latest(run: Path) -> float:
    return max((f.stat().st_mtime for f in (run / "metrics").rglob("*") if f.is_file()), default=0)


@register("mlflow")
class MlflowFiles(WholeReader):
    describe = "MLflow's local file store (mlruns/<experiment>/<run>/metrics/<key>)"

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return path.is_dir() and bool(runs_under(path))

    def run(self, path: Path) -> Path:
        runs = runs_under(path)
        if not runs:
            raise LogError(f"{path}: no MLflow run in it (a folder with metrics/ and meta.yaml)")
        if len(runs) == 1:
            return runs[0]
        run = max(runs, key=_latest)
        note = f"{len(runs)} MLflow runs under {path}: read the latest, {run.name}"
        if note not in self.notes:
            self.notes.append(note)
        return run

    def signature(self, path: Path) -> tuple[Any, ...]:
        return files_signature(self.run(path) / "metrics")

    def entries(self, path: Path) -> list[Entry]:
        metrics_dir = self.run(path) / "metrics"
        steps: dict[int, dict[str, float]] = {}
        for f in sorted(metrics_dir.rglob("*")):
            if not f.is_file():
                continue
            key = f.relative_to(metrics_dir).as_posix()
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                raise LogError(f"{f}: not an MLflow metric file") from None
            for i, line in enumerate(text.splitlines(), start=1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) not in (2, 3):
                    raise LogError(f"{f} line {i}: expected 'timestamp value step'")
                try:
                    value = float(parts[1])
                    step = int(parts[2]) if len(parts) == 3 else 0
                except ValueError:
                    raise LogError(f"{f} line {i}: expected 'timestamp value step'") from None
                steps.setdefault(step, {})[key] = value
        return [Entry(s, m, (), "mlflow") for s, m in sorted(steps.items()) if s >= 0]
