"""UI benchmark: time until the charts are drawn in a real browser, server warm.

    .venv/bin/python bench/ui_bench.py                  # 100 runs x 1,000 steps x 30 metrics
    .venv/bin/python bench/ui_bench.py --quick          # 10 runs x 100 steps, seconds
    .venv/bin/python bench/ui_bench.py --db sqlite:///x.db   # reuse / keep a store
    .venv/bin/python bench/ui_bench.py --screenshot-only --db URL [--out docs/img/pair.png]

Figures (target from issue 6, 2 CPU cores): over a store of 100 runs x 1,000 steps x
30 metrics (3M metric rows, plus |log-ratio| distributions every 20 steps), with the
Streamlit server started and every page loaded once (warm), the seconds from navigation
start to every chart (and table) of the page being drawn, measured in Debian's Chromium:
- the sweep page (100-run table, leaderboard, outcome chart): <= 2 s;
- a 10-run comparison page (six figures + two ECDF charts): <= 2 s.
Each is the median of ``--repeats`` fresh page loads, both with the UI's query cache warm
(a reload within its TTL) and cold (after the TTL ran out, so every query hits the
database again). Prints the figures and writes bench/results/ui_bench.md.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine  # noqa: E402  (bench/ is on sys.path when run as a script)

from correction import names  # noqa: E402
from store import Store, open_store  # noqa: E402
from tools.browser import VIEWPORT, chromium, load  # noqa: E402
from ui.launch import running_server  # noqa: E402
from ui.locate import TTL_S  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "ui_bench.md"
TARGET_S = 2.0
COMPARE_RUNS = 10

UI_NAMES = [
    names.SCORE_MEAN, names.PROBS_DIFF_MEAN, names.ABS_LOG_RATIO_MEAN,
    names.RESPONSE_LENGTH_MEAN, names.RESPONSE_BUDGET,
    names.tail("text", "p95"), names.tail("post_tool", "p95"),
    names.ess("text"), names.ess("post_tool"),
]  # fmt: skip
OTHER_NAMES = [
    names.SCORE_STD, names.SCORE_MIN, names.SCORE_MAX, names.ZERO_ADV_FRAC,
    names.RESPONSE_LENGTH_MAX, names.CLIP_RATIO, names.PROBS_DIFF_MAX, names.KL,
    names.K3_KL, names.LOG_PPL_DIFF, names.CHI2_TOKEN, names.IS_MEAN, names.IS_ESS,
    names.MASKED_FRACTION, names.NUM_TURNS, names.PARSE_FAIL_FRAC, names.SUCCESS_RATE,
    names.TOOL_CALLS, names.PG_LOSS, names.ENTROPY, names.GRAD_NORM,
]  # fmt: skip


def payload(rng: random.Random, scale: float) -> dict[str, Any]:
    """A |log-ratio| histogram in the interfaces.md layout (log buckets, 1% wide)."""
    keys = sorted(
        {
            int(math.log(max(1e-6, rng.lognormvariate(math.log(scale), 1.2))) / math.log(1.02))
            for _ in range(400)
        }
    )
    counts = [rng.randint(1, 50) for _ in keys]
    upper = [1.02 ** (k + 1) for k in keys]
    return {
        "scheme": "logbucket:alpha=0.01,min=1e-06",
        "keys": keys,
        "counts": counts,
        "upper": upper,
    }


def fill(st: Store, runs: int, steps: int, n_metrics: int, seed: int = 0) -> dict[str, Any]:
    """A sweep of control/treatment pairs with the UI's figures among ``n_metrics`` names."""
    metric_list = (UI_NAMES + OTHER_NAMES)[:n_metrics]
    rng = random.Random(seed)
    sid = st.ensure_sweep("ui-bench", f"synthetic: {runs} runs x {steps} steps x {n_metrics}")
    ids: list[int] = []
    t0 = time.perf_counter()
    for r in range(runs):
        control = r % 2 == 0
        rid = st.ensure_run(
            sid, f"trial_{r:04d}", role="control" if control else "treatment",
            pair_key=f"seed{r // 2}", seed=r // 2, compression="none" if control else "q2",
            correction="none" if control else ("none", "tis", "icepop", "seq_mis")[(r // 2) % 4],
            config={"steps": steps, "seed": r // 2},
        )  # fmt: skip
        ids.append(rid)
        level = {m: rng.uniform(0.1, 1.0) for m in metric_list}
        batch: list[tuple[int, dict[str, float], dict[str, Any]]] = []
        gap = 0.006 if control else 0.3
        for step in range(1, steps + 1):
            m: dict[str, float] = {}
            for name in metric_list:
                level[name] = abs(level[name] + rng.gauss(0.0, 0.02))
                v = level[name] * (10.0 if rng.random() < 0.002 else 1.0)
                m[name] = v
            m[names.RESPONSE_BUDGET] = 512.0
            m[names.PROBS_DIFF_MEAN] = gap * (1 + 0.1 * rng.random())
            dists = {}
            if step % 20 == 0 or step == 1:
                dists = {
                    names.dist(s): payload(rng, gap * (3 if s == "post_tool" else 1))
                    for s in names.SLICES
                }
            batch.append((step, m, dists))
            if len(batch) == 50:
                st.write_steps(rid, batch)
                batch = []
        if batch:
            st.write_steps(rid, batch)
        if not control and (r // 2) % 4 == 0:
            st.write_decision(rid, steps, "score_collapse", "stop", {"score": -0.1, "k": 3})
            st.set_run_status(rid, "stopped", stop_rule="score_collapse", stop_step=steps)
        else:
            st.set_run_status(rid, "completed")
    st.set_sweep_status(sid, "completed")
    return {"sweep_id": sid, "ids": ids, "fill_s": time.perf_counter() - t0, "names": metric_list}


def measure(page: Any, url: str, charts: int, tables: int, repeats: int, cold: bool) -> list[float]:
    """Seconds to drawn for ``repeats`` full page loads in the same tab (following a link)."""
    out = []
    for _ in range(repeats):
        # cold: let every cached query expire; warm: a short pause, well within the TTL
        time.sleep(TTL_S + 0.5 if cold else 1.0)
        out.append(load(page, url, charts=charts, tables=tables, timeout_s=120))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None, help="store URL; filled if it holds no ui-bench sweep")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="10 runs x 100 steps, 3 repeats")
    ap.add_argument(
        "--tag", default=None,
        help="a second machine's figures: write results/ui_bench-TAG.md (kept beside the "
        "untagged one; run_all.py collects both)",
    )  # fmt: skip
    ap.add_argument(
        "--screenshot-only", action="store_true", help="write the pair screenshot of --db"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "pair.png")
    args = ap.parse_args()
    if args.screenshot_only:
        from tools.screenshot import main as shot

        return shot([*(["--db", args.db] if args.db else []), "--out", str(args.out)])
    if args.quick:
        args.runs, args.steps, args.repeats = 10, 100, 3
    if args.metrics > len(UI_NAMES) + len(OTHER_NAMES):
        ap.error(f"--metrics at most {len(UI_NAMES) + len(OTHER_NAMES)}")
    load_start = os.getloadavg()
    cmd = "python bench/ui_bench.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    tmp = tempfile.TemporaryDirectory(prefix="ui_bench_")
    url = args.db or f"sqlite:///{tmp.name}/ui_bench.db"
    st = open_store(url)
    sweep = next((s for s in st.sweeps() if s.name == "ui-bench"), None)
    if sweep is None:
        print(
            f"filling {url}: {args.runs} runs x {args.steps} steps x {args.metrics} metrics",
            flush=True,
        )
        info = fill(st, args.runs, args.steps, args.metrics)
        sweep_id, ids, fill_s = info["sweep_id"], info["ids"], info["fill_s"]
        print(f"  filled in {fill_s:.1f} s", flush=True)
    else:
        sweep_id, ids, fill_s = sweep.id, [r.id for r in st.runs(sweep.id)], None
        print(f"reusing sweep ui-bench ({len(ids)} runs) in {url}", flush=True)
    n_rows = len(ids) * args.steps * args.metrics
    st.close()
    sweep_url = f"/sweep?sweep={sweep_id}"
    cmp_ids = ids[:COMPARE_RUNS]
    cmp_url = "/compare?runs=" + ",".join(map(str, cmp_ids))
    results: dict[str, dict[str, list[float]]] = {}
    with running_server(url, timeout_s=120) as srv, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        first_sweep = load(page, srv.url + sweep_url, charts=1, tables=3, timeout_s=180)
        first_cmp = load(page, srv.url + cmp_url, charts=8, timeout_s=180)
        print(f"warm-up loads: sweep {first_sweep:.2f} s, compare {first_cmp:.2f} s", flush=True)
        for label, path, charts, tables in (
            ("sweep", sweep_url, 1, 3),
            ("compare", cmp_url, 8, 0),
        ):
            results[label] = {
                "warm": measure(page, srv.url + path, charts, tables, args.repeats, cold=False),
                "cold": measure(page, srv.url + path, charts, tables, args.repeats, cold=True),
            }
            for kind, xs in results[label].items():
                print(f"  {label} ({kind} cache): median {statistics.median(xs):.2f} s  "
                      f"[{', '.join(f'{x:.2f}' for x in xs)}]", flush=True)  # fmt: skip
    ok = lambda x: "meets" if x <= TARGET_S else "**misses**"  # noqa: E731
    lines = [
        "## Web UI (bench/ui_bench.py)"
        + (" -- quick shape" if args.quick else "")
        + (f" -- {args.tag}" if args.tag else ""),
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        f"- machine: {machine()}",
        f"- load average (1/5/15 min) at the start: {' '.join(f'{x:.2f}' for x in load_start)}"
        f", at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        " (a shared machine reads slower; rerun on a quiet one for final figures)",
        f"- command: `{cmd}`",
        f"- store: SQLite, {len(ids)} runs x {args.steps} steps x {args.metrics} metrics = "
        f"{n_rows:,} metric rows, |log-ratio| distributions every 20 steps"
        + (f" (filled in {fill_s:.0f} s)" if fill_s else ""),
        "- measured: Debian Chromium (headless, Playwright), seconds from navigation start "
        "until every chart (vega-embed svg or canvas with marks) and table (data grid "
        "canvas) of the "
        f"page is drawn; median of {args.repeats} full page loads (same tab, as following "
        "a link) after one warm-up load per page. "
        f"Warm cache = 1 s after the previous load, within the UI's {TTL_S:.0f} s query "
        "TTL; cold = after it expired (every query runs again).",
        f"- warm-up (first) loads: sweep {first_sweep:.2f} s, compare {first_cmp:.2f} s",
        "",
        "| figure | measured (median) | all loads | target | |",
        "|---|---|---|---|---|",
    ]
    desc = {
        "sweep": f"sweep page ({len(ids)} runs: table, leaderboard, chart)",
        "compare": f"{len(cmp_ids)}-run comparison (6 figures + 2 ECDFs)",
    }
    for label, kinds in results.items():
        for kind, xs in kinds.items():
            med = statistics.median(xs)
            lines.append(
                f"| {desc[label]}, {kind} cache | {med:.2f} s | "
                f"{', '.join(f'{x:.2f}' for x in xs)} | <= {TARGET_S:.0f} s | {ok(med)} |"
            )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out = RESULTS.with_name("ui_bench_quick.md") if args.quick else RESULTS
    if args.tag:
        out = out.with_name(f"{out.stem}-{args.tag}.md")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
