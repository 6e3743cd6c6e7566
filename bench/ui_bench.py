"""UI benchmark: time until a page's charts and tables are drawn in a real browser.

    .venv/bin/python bench/ui_bench.py                  # the figures (see below)
    .venv/bin/python bench/ui_bench.py --tag amd-epyc   # the same on a second machine
    .venv/bin/python bench/ui_bench.py --quick          # small shapes, seconds: proves it runs
    .venv/bin/python bench/ui_bench.py --db sqlite:///x.db   # reuse / keep a store
    .venv/bin/python bench/ui_bench.py --screenshot-only --db URL [--out docs/img/pair.png]

Targets (issues 6 and 14, 2 CPU cores, Debian Chromium, the Streamlit server warm): each
page drawn within 2 s of navigation start. Over one SQLite store holding two synthetic
correction-threshold sweeps (``fill``: per seed a dense control and nine treatments, tis
over C, icepop over lo, k3_rs over hi and no correction, a third of them stopped by one of
four rules at nearby steps, thresholds in each run's stored config):
- a sweep of 100 runs x 1,000 steps x 30 metrics (3M metric rows, |log-ratio|
  distributions every 20 steps):
  - its sweep page (runs table, leaderboard with its spread and outcome views, the first
    varying threshold's three views, decisions);
  - a 10-run compare page (one seed's control and nine treatments: six figures and two
    ECDFs, stop labels of nearby stops);
- a sweep of 1,000 runs x 100 steps x the compare page's 9 metrics:
  - the sweeps page (every sweep, 1,100 runs counted);
  - its sweep page (1,000-row runs table, leaderboard, threshold views).
Each figure is the median of ``--repeats`` full page loads, with the UI's query cache warm
(a reload within its TTL) and cold (after the TTL ran out, so every query hits the
database again). The page counts as drawn when every chart holds its views' marks and
every table its grid, checked inside the page once per animation frame. Prints the
figures and writes bench/results/ui_bench.md (``--tag``: ui_bench-TAG.md) with the CPU
model, its bfloat16 flags and the date.
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine  # noqa: E402  (bench/ is on sys.path when run as a script)

from gapwatch.correction import names  # noqa: E402
from gapwatch.store import Store, open_store  # noqa: E402
from gapwatch.ui.launch import running_server  # noqa: E402
from gapwatch.ui.locate import TTL_S  # noqa: E402
from tools.browser import VIEWPORT, chromium, load  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "ui_bench.md"
TARGET_S = 2.0
COMPARE_RUNS = 10

UI_NAMES = [
    names.SCORE_MEAN, names.PROBS_DIFF_MEAN, names.ABS_LOG_RATIO_MEAN,
    names.RESPONSE_LENGTH_MEAN, names.RESPONSE_BUDGET,
    names.tail("text", "p95"), names.tail("post_tool", "p95"),
    names.ess("text"), names.ess("post_tool"),
    *(names.by_turn(names.PROBS_DIFF_MEAN, b) for b in names.TURN_BUCKETS),
]  # fmt: skip
OTHER_NAMES = [
    names.SCORE_STD, names.SCORE_MIN, names.SCORE_MAX, names.ZERO_ADV_FRAC,
    names.RESPONSE_LENGTH_MAX, names.CLIP_RATIO, names.PROBS_DIFF_MAX, names.KL,
    names.K3_KL, names.LOG_PPL_DIFF, names.CHI2_TOKEN, names.IS_MEAN, names.IS_ESS,
    names.MASKED_FRACTION, names.NUM_TURNS, names.PARSE_FAIL_FRAC, names.SUCCESS_RATE,
    names.TOOL_CALLS, names.PG_LOSS, names.ENTROPY, names.GRAD_NORM,
]  # fmt: skip
ARMS: list[tuple[str, dict[str, float]]] = [
    ("tis", {"C": 1.5}), ("tis", {"C": 2.0}), ("tis", {"C": 4.0}),
    ("icepop", {"lo": 0.5, "hi": 5.0}), ("icepop", {"lo": 0.8, "hi": 5.0}),
    ("k3_rs", {"hi": 0.001}), ("k3_rs", {"hi": 0.01}), ("k3_rs", {"hi": 0.1}),
    ("none", {}),
]  # fmt: skip
"""The treatments of each seed: three corrections whose thresholds vary, and none."""
RUNS_PER_SEED = 1 + len(ARMS)
STOP_RULES = ("score_collapse", "length_runaway", "post_tool_tail_growth", "ess_collapse")
CODEC = "topk(keep=0.05)"


def label(name: str, kw: dict[str, float]) -> str:
    """The correction column as a sweep writes it: ``tis(C=2)``."""
    return name if not kw else f"{name}({', '.join(f'{k}={v:g}' for k, v in kw.items())})"


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


def fill(
    st: Store, name: str, runs: int, steps: int, n_metrics: int, *, dists: bool, seed: int = 0
) -> dict[str, Any]:
    """A threshold sweep of ``runs`` runs (whole seeds of ``RUNS_PER_SEED``) with the UI's
    figures among ``n_metrics`` names; a stopped run's steps end at its stop step."""
    metric_list = (UI_NAMES + OTHER_NAMES)[: max(n_metrics, len(UI_NAMES))]
    rng = random.Random(seed)
    sid = st.ensure_sweep(name, f"synthetic: {runs} runs x {steps} steps x {n_metrics}")
    ids: list[int] = []
    t0 = time.perf_counter()
    for r in range(runs):
        s, arm = divmod(r, RUNS_PER_SEED)
        control = arm == 0
        corr, kw = ("none", {}) if control else ARMS[arm - 1]
        rid = st.ensure_run(
            sid, f"s{s}-{'control' if control else label(corr, kw)}",
            role="control" if control else "treatment", pair_key=f"mul/tiny/s{s}", seed=s,
            compression="none" if control else CODEC, correction=label(corr, kw),
            config={
                "steps": steps, "seed": s, "compression": "none" if control else "topk",
                "compression_kwargs": {} if control else {"keep": 0.05},
                "correction": corr, "correction_kwargs": kw,
            },
        )  # fmt: skip
        ids.append(rid)
        stop = None
        if not control and rng.random() < 0.35:  # stops cluster: 30-45% of the budget
            stop = (rng.randint(int(steps * 0.3), int(steps * 0.45)), rng.choice(STOP_RULES))
        last = stop[0] if stop else steps
        level = {m: rng.uniform(0.1, 1.0) for m in metric_list}
        batch: list[tuple[int, dict[str, float], dict[str, Any]]] = []
        gap = 0.006 if control else 0.3
        for step in range(1, last + 1):
            m: dict[str, float] = {}
            for metric in metric_list:
                level[metric] = abs(level[metric] + rng.gauss(0.0, 0.02))
                m[metric] = level[metric] * (10.0 if rng.random() < 0.002 else 1.0)
            m[names.RESPONSE_BUDGET] = 512.0
            m[names.PROBS_DIFF_MEAN] = gap * (1 + 0.1 * rng.random())
            d = {}
            if dists and (step % 20 == 0 or step == 1):
                d = {
                    names.dist(sl): payload(rng, gap * (3 if sl == "post_tool" else 1))
                    for sl in names.SLICES
                }
            batch.append((step, m, d))
            if len(batch) == 50:
                st.write_steps(rid, batch)
                batch = []
        if batch:
            st.write_steps(rid, batch)
        if stop:
            st.write_decision(rid, stop[0], stop[1], "stop", {"k": 2})
            st.set_run_status(rid, "stopped", stop_rule=stop[1], stop_step=stop[0])
        else:
            st.set_run_status(rid, "completed")
    st.set_sweep_status(sid, "completed")
    return {"sweep_id": sid, "ids": ids, "fill_s": time.perf_counter() - t0}


@dataclass(frozen=True)
class Page:
    """One measured page: what it shows, its path, and what must be drawn."""

    label: str
    path: str
    charts: int
    views: int
    tables: int


def measure(page: Any, url: str, p: Page, repeats: int, cold: bool) -> list[float]:
    """Seconds to drawn for ``repeats`` full page loads in the same tab (following a link)."""
    out = []
    for _ in range(repeats):
        # cold: let every cached query expire; warm: a short pause, well within the TTL
        time.sleep(TTL_S + 0.5 if cold else 1.0)
        out.append(
            load(page, url + p.path, charts=p.charts, views=p.views, tables=p.tables,
                 timeout_s=120)
        )  # fmt: skip
    return out


def ensure(st: Store, name: str, runs: int, steps: int, metrics: int, dists: bool) -> Any:
    """The sweep ``name`` of the store, filled first if absent; (id, run ids, fill s)."""
    sweep = next((s for s in st.sweeps() if s.name == name), None)
    if sweep is not None:
        print(f"reusing sweep {name} ({sweep.run_counts})", flush=True)
        return sweep.id, [r.id for r in st.runs(sweep.id)], None
    print(f"filling {name}: {runs} runs x {steps} steps x {metrics} metrics", flush=True)
    info = fill(st, name, runs, steps, metrics, dists=dists)
    print(f"  filled in {info['fill_s']:.1f} s", flush=True)
    return info["sweep_id"], info["ids"], info["fill_s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None, help="store URL; sweeps it lacks are filled")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=30)
    ap.add_argument("--many-runs", type=int, default=1000)
    ap.add_argument("--many-steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--quick", action="store_true",
        help="20 runs x 100 steps, 100 runs x 20 steps, 2 repeats (writes ui_bench_quick.md)",
    )  # fmt: skip
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
        args.runs, args.steps, args.many_runs, args.many_steps = 20, 100, 100, 20
        args.repeats = 2
    if args.metrics > len(UI_NAMES) + len(OTHER_NAMES):
        ap.error(f"--metrics at most {len(UI_NAMES) + len(OTHER_NAMES)}")
    if args.runs < COMPARE_RUNS:
        ap.error(f"--runs at least {COMPARE_RUNS} (the compare page draws {COMPARE_RUNS})")
    load_start = os.getloadavg()
    cmd = "python bench/ui_bench.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    tmp = tempfile.TemporaryDirectory(prefix="ui_bench_")
    url = args.db or f"sqlite:///{tmp.name}/ui_bench.db"
    st = open_store(url)
    sid, ids, fill_s = ensure(st, f"ui-bench-{args.runs}", args.runs, args.steps, args.metrics,
                              dists=True)  # fmt: skip
    many = f"ui-bench-{args.many_runs}"
    mid, many_ids, many_fill_s = ensure(st, many, args.many_runs, args.many_steps,
                                        len(UI_NAMES), dists=False)  # fmt: skip
    total_runs = sum(sum(s.run_counts.values()) for s in st.sweeps())
    st.close()
    sweep_views = 2 + 3  # spread + outcome; the first varying threshold's three views
    pages = [
        Page(f"sweep page ({len(ids)} runs: table, leaderboard, threshold views)",
             f"/sweep?sweep={sid}", 1, sweep_views, 3),
        Page(f"{COMPARE_RUNS}-run compare (6 figures + per-turn gap + 2 ECDFs in one chart)",
             "/compare?runs=" + ",".join(map(str, ids[:COMPARE_RUNS])), 1, 9, 0),
        Page(f"sweeps page ({total_runs:,} runs in the store)", "/", 0, 0, 1),
        Page(f"sweep page ({len(many_ids):,} runs: table, leaderboard, threshold views)",
             f"/sweep?sweep={mid}", 1, sweep_views, 3),
    ]  # fmt: skip
    results: dict[str, dict[str, list[float]]] = {}
    first: dict[str, float] = {}
    with running_server(url, timeout_s=120) as srv, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)
        for p in pages:
            first[p.label] = measure(page, srv.url, p, 1, cold=False)[0]
        print("warm-up loads: " + ", ".join(f"{v:.2f} s" for v in first.values()), flush=True)
        for p in pages:
            results[p.label] = {
                "warm": measure(page, srv.url, p, args.repeats, cold=False),
                "cold": measure(page, srv.url, p, args.repeats, cold=True),
            }
            for kind, xs in results[p.label].items():
                print(f"  {p.label} ({kind} cache): median {statistics.median(xs):.2f} s  "
                      f"[{', '.join(f'{x:.2f}' for x in xs)}]", flush=True)  # fmt: skip
    ok = lambda x: "meets" if x <= TARGET_S else "**misses**"  # noqa: E731
    filled = [f"{s:.0f} s" for s in (fill_s, many_fill_s) if s]
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
        f"- store: SQLite, two threshold sweeps: {len(ids)} runs x {args.steps} steps x "
        f"{args.metrics} metrics with |log-ratio| distributions every 20 steps, and "
        f"{len(many_ids):,} runs x {args.many_steps} steps x {len(UI_NAMES)} metrics; per "
        f"seed a dense control and {len(ARMS)} treatments (tis over C, icepop over lo, "
        "k3_rs over hi, none), about a third stopped at 30-45% of the budget"
        + (f" (filled in {' + '.join(filled)})" if filled else ""),
        "- measured: Debian Chromium (headless, Playwright), seconds from navigation start "
        "until every chart holds its views' marks (SVG) and every table its grid, checked "
        "in the page once per animation frame; median of "
        f"{args.repeats} full page loads (same tab, as following a link) after one warm-up "
        f"load per page. Warm cache = 1 s after the previous load, within the UI's "
        f"{TTL_S:.0f} s query TTL; cold = after it expired (every query runs again).",
        "- warm-up (first) loads: " + ", ".join(f"{k}: {v:.2f} s" for k, v in first.items()),
        "",
        "| figure | measured (median) | all loads | target | |",
        "|---|---|---|---|---|",
    ]
    for lab, kinds in results.items():
        for kind, xs in kinds.items():
            med = statistics.median(xs)
            lines.append(
                f"| {lab}, {kind} cache | {med:.2f} s | "
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
