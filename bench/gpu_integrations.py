"""The TRL and verl integrations on a GPU: a step of ``bench/gpu_check.sh``.

- ``trl``: ``GapGRPOTrainer`` (``examples/trl_gap.py``'s setup: the tiny model, the ``mul``
  episodes as TRL's ``rollout_func``) on the device for a few steps, dense and compressed
  (``topk keep=0.05``, corrected by ``tis``). The sampler is vLLM (the workers' vLLM
  sampler) where vLLM imports, else the torch sampler in bfloat16 on the device: vLLM
  cannot be carried to the lent GPU machine, so there it is the torch one. Checks: every
  logged figure finite, step-1 gap dense below 0.005 and compressed in [0.3, 0.95] (the
  quick preset's ranges, ``bench/gpu_check.py`` EXPECT), the post-tool p95 of the
  compressed run at least 10x the dense one's.
- ``verl``: the verl plug-in's figures from a batch of tensors on the device equal the
  built-in diagnostics' on the same tensors. The batch is a real ``verl.DataProto`` where
  verl imports; verl's protocol module imports Ray, which the lent GPU machine lacks and
  which is too large to carry, so there it is the ``TensorDict`` that a DataProto holds
  (tensordict is carried), wrapped the way the plug-in reads it (``batch.batch``). The
  real DataProto is tested on CPU (tests/gapwatch/test_verl_plugin.py).

Writes ``OUT/integrations.json`` (and each TRL run's steps as ``OUT/trl-<mode>.jsonl``, a
log ``gapwatch replay`` reads); exits 0 only if every check passed.

    python bench/gpu_integrations.py --out DIR [--device cuda] [--steps 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DENSE_MAX, COMPRESSED = 0.005, (0.3, 0.95)
RATIO = 10.0


def trl_run(mode: str, device: str, steps: int, out: Path) -> dict[str, Any]:
    """One GapGRPOTrainer run on ``device``; its logged steps and what they show."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from gapwatch.integrations.trl_episodes import ToolEpisodes, episode_reward
    from gapwatch.integrations.trl_gap import GapConfig, GapGRPOTrainer  # no store needed
    from gapwatch.workers import RunConfig
    from gapwatch.workers.model import ensure_warm_start

    torch.manual_seed(0)
    rc = RunConfig.preset("quick")
    path = ensure_warm_start(rc)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(device)
    sampler = "vllm" if device == "cuda" and importlib.util.find_spec("vllm") else "torch"
    episodes = ToolEpisodes(model, tok, sampler=sampler, device=device, seed=0)
    cfg = GRPOConfig(
        output_dir=str(out / f"trl-{mode}"), max_steps=steps, per_device_train_batch_size=32,
        gradient_accumulation_steps=2, steps_per_generation=2, num_generations=4,
        learning_rate=3e-4, beta=0.05, loss_type="bnpo", logging_steps=1, save_strategy="no",
        report_to=[], use_cpu=device == "cpu", bf16=False, seed=0, max_completion_length=200,
        disable_tqdm=True,
    )  # fmt: skip
    gap = GapConfig(codec="topk", codec_kwargs={"keep": 0.05}, correction="tis") if (
        mode == "compressed") else GapConfig()  # fmt: skip
    trainer = GapGRPOTrainer(
        model=model, args=cfg, reward_funcs=episode_reward, rollout_func=episodes,
        train_dataset=episodes.dataset(1024, 0), processing_class=tok, gap=gap,
    )  # fmt: skip
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    rows = [
        {"step": h["step"], **{k: v for k, v in h.items() if isinstance(v, int | float)}}
        for h in trainer.state.log_history
        if "training/rollout_probs_diff_mean" in h
    ]
    with (out / f"trl-{mode}.jsonl").open("w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    finite = all(math.isfinite(v) for r in rows for v in r.values())
    first = rows[0] if rows else {}
    return {
        "mode": mode, "sampler": sampler, "device": device, "steps": len(rows), "wall_s": wall,
        "finite": finite, "gap_step1": first.get("training/rollout_probs_diff_mean"),
        "post_p95_step1": first.get("tail/abs_log_ratio/post_tool/p95"),
        "step_time_s": [r.get("step_time") for r in rows],
    }  # fmt: skip


def verl_check(device: str) -> dict[str, Any]:
    """The plug-in's figures against the built-in diagnostics on one DataProto."""
    import types

    import torch

    from gapwatch.correction import diagnostics
    from gapwatch.integrations.verl import gap_metrics, slices

    g = torch.Generator().manual_seed(0)
    B, T = 8, 64
    resp = torch.ones((B, T), dtype=torch.long)
    resp[:4, 20:30] = 0  # tool responses in half the rows
    old = -torch.rand((B, T), generator=g) * 3
    t = {
        "responses": torch.ones((B, T), dtype=torch.long),
        "attention_mask": torch.ones((B, 2 * T), dtype=torch.long),
        "response_mask": resp,
        "old_log_probs": old,
        "rollout_log_probs": old + torch.randn((B, T), generator=g) * 0.3,
    }
    tensors = {k: v.to(device) for k, v in t.items()}
    try:
        from verl import DataProto

        batch: Any = DataProto.from_dict(tensors=tensors)
        container = "verl.DataProto"
    except ImportError:  # verl's protocol imports Ray: not on the lent GPU machine
        from tensordict import TensorDict

        batch = types.SimpleNamespace(batch=TensorDict(tensors, batch_size=[B]), meta_info={})
        container = "TensorDict (verl imports Ray, absent here)"
    figs, _ = gap_metrics(batch)
    mask, post = slices(batch)
    want = diagnostics.summarize(batch.batch["old_log_probs"], batch.batch["rollout_log_probs"],
                                 mask, post_tool=post)  # fmt: skip
    worst = max(abs(figs[k] - v) / max(1e-12, abs(v)) for k, v in want.items())
    return {"device": device, "container": container, "figures": len(want),
            "worst_rel_diff": worst, "ok": worst < 1e-5}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--as-gpu-machine", action="store_true",
                    help="hide the packages the GPU machine lacks (the CPU rehearsal)")  # fmt: skip
    ap.add_argument("--shrink", action="store_true", help="accepted with the rehearsal's flags")
    args = ap.parse_args(argv)
    if os.environ.get("GPU_CHECK_PARSE_ONLY"):  # gpu_check.sh --dry-run: the step parses
        print(f"arguments parse: {vars(args)}")
        return 0
    if args.as_gpu_machine:
        sys.path.insert(0, str(ROOT / "bench"))
        from gpu_check import simulate_gpu_machine

        simulate_gpu_machine()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"checks": []}

    def check(what: str, ok: bool, detail: str) -> None:
        res["checks"].append({"check": what, "ok": bool(ok), "detail": detail})
        print(f"{'ok ' if ok else 'FAIL'} {what}: {detail}", flush=True)

    try:
        runs = {m: trl_run(m, args.device, args.steps, out) for m in ("dense", "compressed")}
        res["trl"] = runs
        d, c = runs["dense"], runs["compressed"]
        check("trl runs finite", d["finite"] and c["finite"] and d["steps"] and c["steps"],
              f"{d['steps']} + {c['steps']} steps, sampler {d['sampler']}")  # fmt: skip
        check("trl dense gap", (d["gap_step1"] or 1.0) < DENSE_MAX, f"{d['gap_step1']}")
        lo, hi = COMPRESSED
        check("trl compressed gap", lo <= (c["gap_step1"] or 0.0) <= hi, f"{c['gap_step1']}")
        ratio = (c["post_p95_step1"] or 0.0) / max(1e-12, d["post_p95_step1"] or 0.0)
        check("trl post-tool p95 compressed/dense", ratio >= RATIO, f"{ratio:.0f}x")
    except Exception as exc:  # noqa: BLE001 - the check reports, it does not crash
        check("trl runs", False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    try:
        v = verl_check(args.device)
        res["verl"] = v
        check(
            "verl plug-in = built-in diagnostics",
            v["ok"],
            f"{v['container']}: worst rel diff {v['worst_rel_diff']:.2e}",
        )
    except Exception as exc:  # noqa: BLE001
        check("verl plug-in", False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    res["ok"] = all(c["ok"] for c in res["checks"])
    (out / "integrations.json").write_text(json.dumps(res, indent=1, default=str))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
