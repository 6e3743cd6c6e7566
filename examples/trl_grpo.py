"""A small TRL GRPO run on CPU, under gapwatch: the tiny built-in model, a tool-use prompt
set made here, and the ``GapwatchCallback``.

Each prompt is a multiplication task whose calculator call and result are already in the
history (``Q:12*34`` / ``<call>12*34</call>`` / ``<r>408</r>``); the policy writes the
final answer. Reward: 1 for the right ``<answer>``, 0 for a wrong one, -0.1 for an
unparseable one (the format penalty of ``workers.envs``). The policy is the tiny model
the built-in worker warm-starts (saved as a Hugging Face model directory, no hub).

``--codec topk --keep 0.05`` compresses the policy's forward with a gapwatch codec: TRL
samples and learns with the same model on CPU (no vLLM), so this is a degraded policy,
not a train-inference gap; TRL's importance-sampling corrections need vLLM and are not
used here (``--correction`` is recorded as the run's label only). For the seed's
experiment itself (a dense sampler, a compressed trainer forward, gapwatch's sliced
diagnostics and corrections in TRL's loss) see ``examples/trl_gap.py``.

    python examples/trl_grpo.py --seed 0 --steps 8                      # into ./gapwatch.db
    python examples/trl_grpo.py --log out/metrics.jsonl --no-store  # for a sweep or a watch
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gapwatch.integrations.trl import GapwatchCallback  # noqa: E402
from gapwatch.workers import RunConfig, codecs, envs  # noqa: E402
from gapwatch.workers.envs import FORMAT_PENALTY, observation_text, parse_action  # noqa: E402
from gapwatch.workers.model import ensure_warm_start  # noqa: E402


def prompts(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` post-tool prompts and their answers (the ``mul`` task's)."""
    env, rng = envs.get("mul"), random.Random(seed)
    rows = []
    for _ in range(n):
        task = env.sample_task(rng)
        a, b = task.operands
        call = f"<call>{a}*{b}</call>"
        rows.append(
            {"prompt": task.prompt + call + observation_text(task.answer), "answer": task.answer}
        )
    return rows


def answer_reward(completions: list[str], answer: list[str], **_: object) -> list[float]:
    """1 right, 0 wrong, -0.1 unparseable; text after the first ``</answer>`` is ignored
    (a stop string, as the built-in samplers use)."""
    out = []
    for text, want in zip(completions, answer, strict=True):
        cut = text.split("</answer>", 1)[0] + "</answer>" if "</answer>" in text else text
        act = parse_action(cut)
        if act is None or act.kind != "answer":
            out.append(FORMAT_PENALTY)
        else:
            out.append(1.0 if act.body.strip() == want else 0.0)
    return out


def end_after(model: object, tok: object, stop: str) -> None:
    """Make ``model.generate`` end each completion with EOS right after ``stop`` (the
    built-in samplers stop at their stop strings; TRL ends completions at EOS only)."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    eos, width = tok.eos_token_id, len(stop)  # type: ignore[attr-defined]

    class EosAfter(LogitsProcessor):  # type: ignore[misc]
        def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            tails = tok.batch_decode(ids[:, -width:], skip_special_tokens=True)  # type: ignore[attr-defined]
            done = torch.tensor([t.endswith(stop) for t in tails], device=scores.device)
            forced = torch.full_like(scores, -torch.inf)
            forced[:, eos] = 0.0
            return torch.where(done[:, None], forced, scores)

    generate = model.generate  # type: ignore[attr-defined]

    def generate_with_stop(*args: object, **kwargs: object) -> object:
        kwargs.setdefault("logits_processor", LogitsProcessorList([EosAfter()]))
        return generate(*args, **kwargs)

    model.generate = generate_with_stop  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--codec", default="none", choices=codecs.names())
    ap.add_argument("--keep", type=float, default=None, help="topk's keep fraction")
    ap.add_argument("--bits", type=int, default=None, help="quant's bits")
    ap.add_argument("--correction", default="none", help="a label for the run (see above)")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--out", default="trl-out", help="TRL's output_dir")
    ap.add_argument(
        "--db", default=None, help="store URL (default: $GAPWATCH_DB_URL or ./gapwatch.db)"
    )
    ap.add_argument("--name", default=None)
    ap.add_argument("--log", default=None, help="also write each step here as JSONL")
    ap.add_argument(
        "--no-store", action="store_true", help="write --log only (a sweep or a watch follows it)"
    )
    ap.add_argument(
        "--rules",
        default=None,
        help="YAML mapping of rule settings, e.g. '{score_collapse: {k: 1}}'",
    )
    args = ap.parse_args()

    import torch
    import yaml
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(1)
    path = ensure_warm_start(RunConfig.preset("quick"))  # the built-in worker's tiny model
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    end_after(model, tok, "</answer>")
    strength = {k: v for k, v in (("keep", args.keep), ("bits", args.bits)) if v is not None}
    if args.codec != "none":
        codecs.attach(model, codecs.get(args.codec, **strength))
    label = args.codec + "".join(f"({k}={v})" for k, v in strength.items())
    cfg = GRPOConfig(
        output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=8,
        num_generations=4, max_completion_length=24, learning_rate=args.lr, beta=0.0,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=args.seed,
        dataloader_num_workers=0,
    )  # fmt: skip
    callback = GapwatchCallback(
        name=args.name, db=args.db, sweep="trl", seed=args.seed, codec=label,
        correction=args.correction, log_path=args.log, store=not args.no_store,
        rules=yaml.safe_load(args.rules) if args.rules else None,
        role="control" if args.codec == "none" else "treatment",
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model, reward_funcs=answer_reward, args=cfg, processing_class=tok,
        train_dataset=Dataset.from_list(prompts(256, args.seed)), callbacks=[callback],
    )  # fmt: skip
    trainer.train()
    where = (
        f" (stopped by {callback.stop.rule} at step {callback.stop.step})" if callback.stop else ""
    )
    print(f"trained {trainer.state.global_step} steps{where}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
