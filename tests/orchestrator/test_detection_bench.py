"""A smoke run of bench/detection_bench.py on a handful of recorded histories (the example
logs): every policy runs through its own classes and the table is scored as the bench
scores it. The full benchmark runs on bench/ground_truth.py's recordings."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "examples" / "logs"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "detection_bench", ROOT / "bench" / "detection_bench.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_detection_bench_smoke(tmp_path: Path) -> None:
    runs = [
        ("seed-dense", "seed_dense.jsonl", "control", None, "seed"),
        ("seed-comp", "seed_compressed.jsonl", "treatment", "seed-dense", "seed"),
        ("tiny-dense", "tiny_dense_lr0.001_seed0.jsonl", "control", None, "tiny"),
        ("tiny-quant", "tiny_quant2_lr0.001_seed0.jsonl", "treatment", "tiny-dense", "tiny"),
    ]
    for _, f, _, _, _ in runs:
        shutil.copy(LOGS / f, tmp_path / f)
    index = [{"key": k, "file": f, "role": r, "control": c, "sweep": s, "seed": 0}
             for k, f, r, c, s in runs]  # fmt: skip
    (tmp_path / "index.json").write_text(json.dumps({"runs": index}))
    bench = _bench()
    loaded = bench.load(tmp_path, quick=False)
    by_key = {r.key: r for r in loaded}
    assert by_key["seed-comp"].collapsed and by_key["seed-comp"].onset == 6
    assert not by_key["seed-dense"].collapsed and by_key["seed-dense"].onset is None
    scores = {s.policy: s for s in bench.evaluate(loaded, with_rlwatch=False)}
    default = scores["gapwatch: default rules"]
    assert default.collapses == 3 and default.caught == 3 and default.false_stops == 0
    assert max(default.delays) <= 2
    assert {"Ray Tune ASHA (grace 1, reduction 4)",
            "Post-Training Toolkit (truncation > 0.3 @30, group std < 0.01 @40)"} <= set(scores)  # fmt: skip
    lines = bench.table(list(scores.values()))
    assert lines[0].startswith("| policy |") and len(lines) == len(scores) + 2
