"""For the benches' smoke tests: a bench script loaded as a module, and a small slice of
the ground truth (bench/results/ground_truth/grid), the recorded histories themselves
under an ``index.json`` of their own."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "bench" / "results" / "ground_truth" / "grid"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as the module ``name`` (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def grid_slice(
    dest: Path,
    seeds: Iterable[int],
    strengths: Iterable[str],
    corrections: Iterable[str],
    grid: Path = GRID,
) -> Path:
    """Copy the controls of ``seeds`` and their treatments at ``strengths`` (codec labels,
    e.g. ``topk_keep0.5``) with ``corrections`` (labels, e.g. ``tis_C2``) into ``dest``,
    from ``grid`` (default: the full ground truth; ``drift`` and ``long`` beside it)."""
    index = json.loads((grid / "index.json").read_text())
    seeds, strengths, corrections = set(seeds), set(strengths), set(corrections)
    picked = []
    for e in index["runs"]:
        if e["seed"] not in seeds:
            continue
        if e["role"] != "control":
            codec, corr = e["run"].split("-", 2)[1:]
            if codec not in strengths or corr not in corrections:
                continue
        shutil.copyfile(grid / e["file"], dest / e["file"])
        picked.append(e)
    (dest / "index.json").write_text(json.dumps({**index, "runs": picked}))
    return dest
