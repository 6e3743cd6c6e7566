"""The seed's paired experiment inside TRL: the sweep's figures and what the diagnostics cost.

Part 1 (``--sweep``): runs ``examples/sweep-trl-gap.yaml`` (2 seeds x dense control + top-k
5% x {none, tis, icepop}, TRL's GRPOTrainer on the tiny model, 1 CPU a trial) twice into
fresh SQLite stores: once with no stopping (each trial's fate by the ground truth's
``fate``: collapsed when its last-5 mean score is below its threshold, and the onset), then
with the default rules, and reads back per pair:

- each control's learning by the ground truth's criteria (``bench/ground_truth.learning``);
- each treatment's stored post-tool mismatch p95 (median over its steps) against its
  control's over the same steps, and against its own text p95;
- every stop (rule, step) against the trial's unstopped fate: a treatment is stopped iff it
  collapses, and no control is stopped;
- whether sketches were stored (the UI's ECDFs read them).

Part 2 (``--overhead``): one process, 1 torch thread, the same ``ToolEpisodes`` rollouts:
``GapGRPOTrainer`` (codec none, correction tis: the diagnostics, the extra no-grad trainer
forward and the weights) against a plain ``trl.GRPOTrainer`` with the same rollout_func and
settings, ``--steps`` steps each, alternating blocks; TRL's own ``step_time`` per step,
median per trainer.

Writes ``bench/results/trl_gap_bench.md``. Rerun: ``.venv/bin/python bench/trl_gap_bench.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._machine import machine as machine_line  # noqa: E402
from gapwatch.correction import names as N  # noqa: E402


def _ground_truth() -> Any:
    spec = importlib.util.spec_from_file_location(
        "ground_truth", ROOT / "bench" / "ground_truth.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ground_truth"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def fates(work: Path) -> dict[str, dict[str, Any]]:
    """Each trial's fate with no rule stopping it (``bench/ground_truth.fate``)."""
    from gapwatch.orchestrator.sweep.config import load_sweep_config
    from gapwatch.orchestrator.sweep.driver import execute_sweep
    from gapwatch.store import open_store

    gt = _ground_truth()
    sweep = load_sweep_config(ROOT / "examples" / "sweep-trl-gap.yaml", ["stopping=false"])
    url = f"sqlite:///{work}/trl-gap-nostop.db"
    out = execute_sweep(sweep, db_url=url, address=None, resume=False,
                        storage=work / "ray-nostop", live=False)  # fmt: skip
    st = open_store(url)
    res = {}
    for r in st.runs(sweep_id=out.sweep_id):
        score = [float(h[N.SCORE_MEAN]) for h in st.history(r.id) if N.SCORE_MEAN in h]
        res[r.trial_id] = gt.fate(score)
    return res


def sweep_part(work: Path) -> list[str]:
    from gapwatch.orchestrator.sweep.config import load_sweep_config
    from gapwatch.orchestrator.sweep.driver import execute_sweep
    from gapwatch.store import open_store

    learning = _ground_truth().learning
    fate = fates(work)  # the same sweep with no stops: what each trial would have become
    sweep = load_sweep_config(ROOT / "examples" / "sweep-trl-gap.yaml", [])
    url = f"sqlite:///{work}/trl-gap.db"
    out = execute_sweep(sweep, db_url=url, address=None, resume=False, storage=work / "ray",
                        live=False)  # fmt: skip
    st = open_store(url)
    runs = st.runs(sweep_id=out.sweep_id)
    hist = {r.id: {int(h["step"]): h for h in st.history(r.id)} for r in runs}
    lines = [
        f"`gapwatch sweep examples/sweep-trl-gap.yaml` (default rules): {out.status}, wall "
        f"**{out.wall_s:.0f} s**, trial-steps {out.trial_steps_used} of {out.trial_steps_budget}.",
        "",
        "| run | role | steps | stop | learning (steps 1-3 -> last 10) | unstopped: fate, "
        "onset | post-tool p95 (median) | its control's, same steps | ratio | own text p95 | "
        "sketches stored |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    controls = {r.pair_key: r for r in runs if r.role == "control"}
    checks: dict[str, bool] = {}
    for r in sorted(runs, key=lambda r: (r.seed, r.role != "control", r.trial_id)):
        h = hist[r.id]
        steps = sorted(h)
        score = [float(h[s][N.SCORE_MEAN]) for s in steps if N.SCORE_MEAN in h[s]]
        stop = f"{r.stop_rule} @ {r.stop_step}" if r.stop_rule else r.status
        n_dist = len(st.distribution_steps(r.id, N.dist("post_tool")))
        post_key, text_key = N.tail("post_tool", "p95"), N.tail("text", "p95")
        post = statistics.median(float(h[s][post_key]) for s in steps if post_key in h[s])
        text = statistics.median(float(h[s][text_key]) for s in steps if text_key in h[s])
        f = fate.get(r.trial_id, {})
        unstopped = f"{f.get('fate', '-')}, {f.get('onset') or '-'}"
        if r.role == "control":
            lr = learning(score)
            learn = f"{lr['first3']:+.3f} -> {lr['last10']:+.3f} ({'meets' if lr['learns'] else 'misses'})"
            checks[f"{r.trial_id} learns"] = bool(lr["learns"])
            checks[f"{r.trial_id} not stopped"] = r.stop_rule is None
            lines.append(f"| {r.trial_id} | control | {len(steps)} | {stop} | {learn} | "
                         f"{unstopped} | {post:.4f} | | | {text:.4f} | {n_dist} steps |")  # fmt: skip
            continue
        c = controls[r.pair_key]
        ch = hist[c.id]
        cpost = statistics.median(
            float(ch[s][post_key]) for s in steps if s in ch and post_key in ch[s]
        )
        ratio = post / cpost if cpost > 0 else float("inf")
        checks[f"{r.trial_id} >= 10x control"] = ratio >= 10
        checks[f"{r.trial_id} post > text"] = post > text
        collapses = f.get("fate") == "collapsed"
        checks[f"{r.trial_id} stopped iff it collapses"] = (r.stop_rule is not None) == collapses
        lines.append(f"| {r.trial_id} | treatment | {len(steps)} | {stop} | | {unstopped} | "
                     f"{post:.4f} | {cpost:.4f} | {ratio:.0f}x | {text:.4f} | {n_dist} steps |")  # fmt: skip
    failed = [k for k, ok in checks.items() if not ok]
    lines += ["", f"Checks: {len(checks) - len(failed)} of {len(checks)} hold"
              + (f"; failing: {', '.join(failed)}" if failed else "") + "."]  # fmt: skip
    return lines


def overhead_part(steps: int, blocks: int, work: Path) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from gapwatch.integrations.trl import GapConfig, GapGRPOTrainer
    from gapwatch.integrations.trl_episodes import ToolEpisodes, episode_reward
    from gapwatch.workers import RunConfig
    from gapwatch.workers.model import ensure_warm_start

    torch.set_num_threads(1)
    path = ensure_warm_start(RunConfig.preset("quick"))

    def build(gap: bool) -> Any:
        torch.manual_seed(0)
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        episodes = ToolEpisodes(model, tok, seed=0)
        cfg = GRPOConfig(
            output_dir=str(work / ("gap" if gap else "plain")), max_steps=steps,
            per_device_train_batch_size=32, gradient_accumulation_steps=2, steps_per_generation=2,
            num_generations=4, learning_rate=0.0, beta=0.05, loss_type="bnpo", logging_steps=1,
            save_strategy="no", report_to=[], use_cpu=True, bf16=False, seed=0,
            max_completion_length=200, disable_tqdm=True,
        )  # fmt: skip
        kw: dict[str, Any] = dict(
            model=model, args=cfg, reward_funcs=episode_reward, rollout_func=episodes,
            train_dataset=episodes.dataset(4096, 0), processing_class=tok,
        )  # fmt: skip
        if gap:
            return GapGRPOTrainer(**kw, gap=GapConfig(correction="tis"))
        return GRPOTrainer(**kw)

    times: dict[str, list[float]] = {"plain": [], "gap": []}
    spent = [0.0]  # seconds inside gapwatch's own parts of GapGRPOTrainer

    def timed(fn: Any) -> Any:
        def inner(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t0

        return inner

    for _ in range(blocks):  # alternating blocks
        for name in ("plain", "gap"):
            tr = build(name == "gap")
            if name == "gap":
                tr._weigh, tr._figures = timed(tr._weigh), timed(tr._figures)
            t0 = time.perf_counter()
            tr.train()
            wall = time.perf_counter() - t0
            per = [float(h["step_time"]) for h in tr.state.log_history if "step_time" in h]
            times[name] += per[1:]  # the first step pays for warm-up
            print(f"[trl_gap_bench] {name}: {len(per)} steps, {wall:.1f} s", flush=True)
    plain, gap = statistics.median(times["plain"]), statistics.median(times["gap"])
    gap_total = blocks * steps * gap  # about: the gap trainer's time in steps
    return [
        f"{steps} steps x {blocks} blocks per trainer, alternating (first step of each block dropped), 1 torch "
        "thread, 16 tasks x 4 episodes of `mul` a step, learning rate 0 so that both "
        "trainers play the same episodes every step (with learning, the two runs' policies "
        "and so their episode lengths drift apart, and step times with them); TRL's "
        "`step_time`:",
        "",
        "| trainer | median step time | steps |",
        "|---|---|---|",
        f"| `trl.GRPOTrainer` + ToolEpisodes | {plain:.3f} s | {len(times['plain'])} |",
        f"| `GapGRPOTrainer` (codec none, tis) | {gap:.3f} s | {len(times['gap'])} |",
        "",
        f"End to end, `GapGRPOTrainer` takes **{100 * (gap / plain - 1):+.1f}%** of the plain "
        f"trainer's step time (target: at most +5%). Timed inside it, gapwatch's own parts "
        f"(the weights in the loss's forward, the step's figures and sketches) took "
        f"{spent[0]:.2f} s of about {gap_total:.0f} s of steps, **{100 * spent[0] / gap_total:.1f}%**; "
        "pi_trainer is the loss's own forward, so no forward is added.",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="part 1 only")
    ap.add_argument("--overhead", action="store_true", help="part 2 only")
    ap.add_argument("--steps", type=int, default=12, help="steps per overhead block")
    ap.add_argument("--blocks", type=int, default=4, help="overhead blocks per trainer")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "trl_gap_bench.md")
    args = ap.parse_args()
    both = not (args.sweep or args.overhead)
    lines = [
        "## The seed's experiment inside TRL (`bench/trl_gap_bench.py`)",
        "",
        f"Machine: {machine_line()}, Python {platform.python_version()}; "
        f"{dt.date.today().isoformat()}. Command: `.venv/bin/python bench/trl_gap_bench.py`.",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="gw-trl-bench-") as tmp:
        if both or args.sweep:
            lines += ["### The paired TRL sweep", "", *sweep_part(Path(tmp)), ""]
        if both or args.overhead:
            lines += ["### What the diagnostics cost a TRL step", "",
                      *overhead_part(args.steps, args.blocks, Path(tmp)), ""]  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
