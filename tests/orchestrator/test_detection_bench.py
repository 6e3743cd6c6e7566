"""A smoke run of bench/detection_bench.py on a handful of recorded histories (the example
logs): every policy runs through its own classes and the table is scored as the bench
scores it. The full benchmark runs on bench/ground_truth.py's recordings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from .grid_slice import bench_module

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "examples" / "logs"


def _bench() -> Any:
    return bench_module("detection_bench")


def test_detection_bench_smoke(tmp_path: Path) -> None:
    # bench/ground_truth.py's layout: s<seed>-control and s<seed>-<codec>-<correction>
    runs = [
        ("s0-control", "seed_dense.jsonl", "control", 0),
        ("s0-topk_keep0.05-none", "seed_compressed.jsonl", "treatment", 0),
        ("s1-control", "tiny_dense_lr0.001_seed0.jsonl", "control", 1),
        ("s1-topk_keep0.05-none", "tiny_quant2_lr0.001_seed0.jsonl", "treatment", 1),
        ("s2-control", "seed_dense.jsonl", "control", 2),  # left out by --quick
    ]
    index = []
    for run, f, role, seed in runs:
        data = (LOGS / f).read_bytes()
        if seed == 0:  # one history gzipped, as the full grid stores them
            (tmp_path / f"{run}.jsonl.gz").write_bytes(gzip.compress(data))
        else:
            (tmp_path / f"{run}.jsonl").write_bytes(data)
        codec = ("none", {}) if role == "control" else ("topk", {"keep": 0.05})
        index.append({"run": run, "seed": seed, "role": role, "codec": codec[0],
                      "codec_kwargs": codec[1], "correction": "none", "correction_kwargs": {}})  # fmt: skip
    (tmp_path / "index.json").write_text(json.dumps({"runs": index}))
    bench = _bench()
    assert len(bench.load(tmp_path, quick=False)) == 5
    loaded = bench.load(tmp_path, quick=True)
    by_key = {r.key: r for r in loaded}
    assert set(by_key) == {f"topk_keep0.05/{r}" for r, *_ in runs[:4]}
    comp = by_key["topk_keep0.05/s0-topk_keep0.05-none"]
    assert comp.collapsed and comp.onset == 6 and comp.control == "topk_keep0.05/s0-control"
    assert not by_key["topk_keep0.05/s0-control"].collapsed
    assert by_key["topk_keep0.05/s0-control"].onset is None
    # the tiny dense run at lr 1e-3 dies too (below 0.05 from step 8 on): a collapsed control
    assert by_key["topk_keep0.05/s1-control"].onset == 8
    scores = {s.policy: s for s in bench.evaluate(loaded, with_rlwatch=False)}
    default = scores["gapwatch: default rules"]
    # the lr-1e-3 control fell within its first 2 steps, inside the score's early window:
    # no default rule catches it since issue 18 (tests/orchestrator/test_replay.py)
    assert default.collapses == 3 and default.caught == 2 and default.false_stops == 0
    assert default.steps_used < default.steps_all
    assert {"Ray Tune ASHA (grace 1, reduction 4)",
            "Post-Training Toolkit (truncation > 0.3 @30, group std < 0.01 @40)"} <= set(scores)  # fmt: skip
    lines = bench.table(list(scores.values()))
    assert lines[0].startswith("| policy |") and len(lines) == len(scores) + 2
