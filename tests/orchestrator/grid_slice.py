"""A small slice of the ground truth (bench/results/ground_truth/grid) for the benches'
smoke tests: the recorded histories themselves, under an ``index.json`` of their own."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "bench" / "results" / "ground_truth" / "grid"


def grid_slice(
    dest: Path, seeds: Iterable[int], strengths: Iterable[str], corrections: Iterable[str]
) -> Path:
    """Copy the controls of ``seeds`` and their treatments at ``strengths`` (codec labels,
    e.g. ``topk_keep0.5``) with ``corrections`` (labels, e.g. ``tis_C2``) into ``dest``."""
    index = json.loads((GRID / "index.json").read_text())
    seeds, strengths, corrections = set(seeds), set(strengths), set(corrections)
    picked = []
    for e in index["runs"]:
        if e["seed"] not in seeds:
            continue
        if e["role"] != "control":
            codec, corr = e["run"].split("-", 2)[1:]
            if codec not in strengths or corr not in corrections:
                continue
        shutil.copyfile(GRID / e["file"], dest / e["file"])
        picked.append(e)
    (dest / "index.json").write_text(json.dumps({**index, "runs": picked}))
    return dest
