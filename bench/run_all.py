"""Rerun every benchmark, one after another, then assemble BENCHMARKS.md.

Each ``bench/<name>.py`` prints its figures and writes ``bench/results/<name>.md`` (with
the machine, the date and the command). This script runs them serially (they must not
compete for the cores) and concatenates the fragments, so every number in BENCHMARKS.md
comes from a script anyone can rerun.

    python bench/run_all.py                 # run all, then assemble
    python bench/run_all.py --only store_bench,correction_bench
    python bench/run_all.py --collect-only  # just reassemble from existing fragments
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
ORDER = [
    "cpu_bench",
    "warmstart_bench",
    "learning_bench",
    "quickstart_threads",
    "store_bench",
    "correction_bench",
    "worker_bench",
    "checkpoint_bench",
    "sweep_bench",
    "trl_gap_bench",
    "real_model_bench",
    "ground_truth",
    "calibrate_rules",
    "detection_bench",
    "lead_time_bench",
    "leaderboard_bench",
    "real_runs_bench",
    "rules_before_after",
    "pipeline_bench",
    "ui_while_writing",
    "watch_bench",
    "fleet_bench",
    "node_loss_bench",
    "chaos_bench",
    "ui_bench",
]
ARGS = {"ground_truth": ["--gzip"]}
"""Arguments a benchmark runs with here (the ground-truth grid is committed gzipped; runs
whose history is there are not run again)."""

HEADER = """# Benchmarks

Every figure here was written by a script in `bench/` (named in each section, with the
exact command, the machine and the date). Rerun them all with `python bench/run_all.py`;
each section says whether its target was met. A section whose title ends in a tag is
the same benchmark on a second machine (its machine line says which).
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated benchmark names")
    ap.add_argument("--collect-only", action="store_true")
    args = ap.parse_args()
    todo = args.only.split(",") if args.only else ORDER
    if not args.collect_only:
        for name in todo:
            script = ROOT / "bench" / f"{name}.py"
            if not script.exists():
                print(f"skip {name}: no script (a fragment assembled from others' figures)")
                continue
            print(f"== {name}", flush=True)
            rc = subprocess.call([sys.executable, str(script), *ARGS.get(name, [])], cwd=ROOT)
            if rc != 0:
                print(f"{name} exited {rc}", file=sys.stderr)
    parts = [HEADER]
    for name in ORDER:
        # the fragment, then any tagged ones (the same bench on another machine)
        for frag in [RESULTS / f"{name}.md", *sorted(RESULTS.glob(f"{name}-*.md"))]:
            if frag.exists():
                parts.append(frag.read_text().strip() + "\n")
    (ROOT / "BENCHMARKS.md").write_text("\n".join(parts))
    print(f"wrote {ROOT / 'BENCHMARKS.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
