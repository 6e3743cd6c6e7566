"""The GRPO loop end to end on the tiny model: rows, advantages, gap, determinism, updates."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from gapwatch.correction import names as N
from gapwatch.workers import envs, train
from gapwatch.workers.config import QUICK_CODEC
from gapwatch.workers.loop import Trainer, build_rows, group_advantages, token_logps
from gapwatch.workers.model import build_tokenizer, encode, load_policy
from gapwatch.workers.rollout import rollout
from gapwatch.workers.sampling import Generation, Sampler

from .conftest import make_sampler, small


def test_all_equal_rewards_give_zero_advantage() -> None:
    r = torch.tensor([1.0, 1.0, 1.0, 1.0, -0.1, -0.1, -0.1, -0.1, 0.0, 1.0, 0.0, 1.0])
    adv = group_advantages(r, 4, 1e-6).view(3, 4)
    assert torch.equal(adv[0], torch.zeros(4)) and torch.equal(adv[1], torch.zeros(4))
    assert torch.allclose(adv[2], torch.tensor([-1.0, 1.0, -1.0, 1.0]) * 0.8660254, atol=1e-4)


class Scripted:
    """A sampler that writes fixed actions (per task prompt, in order): tests row bookkeeping."""

    def __init__(self, tokenizer: Any, scripts: dict[str, list[tuple[str, bool]]]) -> None:
        self.tok, self.scripts = tokenizer, scripts

    def generate(self, prompts: list[list[int]], **_: Any) -> list[Generation]:
        out = []
        for p in prompts:
            hist = self.tok.decode(p, skip_special_tokens=True)
            task = hist.split("\n", 1)[0] + "\n"
            text, truncated = self.scripts[task][hist.count("<r>")]
            ids = encode(self.tok, text, first=False)
            out.append(Generation(ids, [-0.5] * len(ids), truncated))
        return out

    def sync(self, model: torch.nn.Module) -> None:
        pass


def test_rows_slices_rewards_from_a_scripted_policy() -> None:
    env = envs.get("mul")
    tok = build_tokenizer()
    rng = random.Random(0)
    tasks = [env.sample_task(rng) for _ in range(4)]
    a, b = tasks[0].operands
    scripts = {
        tasks[0].prompt: [(f"<call>{a}*{b}</call>", False), (f"<answer>{a * b}</answer>", False)],
        tasks[1].prompt: [("<answer>7</answer>", False)],  # no tool: wrong, text slice only
        tasks[2].prompt: [("<call>1*1</call>", False), ("<answer>1" + "1" * 40, True)],  # truncated
        tasks[3].prompt: [("<call>2*2</call>", False)] * 3,  # out of interactions
    }
    trajs = rollout(
        env,
        tasks,
        2,
        Scripted(tok, scripts),
        tok,
        max_interactions=3,
        token_budget=48,
        temperature=1.0,
        seed=0,
    )
    by_task = {t.task.prompt: t for t in trajs}
    t0, t1, t2, t3 = (by_task[t.prompt] for t in tasks)
    assert (t0.reward, t0.success, t0.tool_calls) == (1.0, True, 1)
    assert [r.post_tool for r in t0.rows] == [False, True]
    assert (t1.reward, [r.post_tool for r in t1.rows]) == (0.0, [False])
    assert t2.reward == -0.1 and [r.post_tool for r in t2.rows] == [False, True]
    assert t2.rows[-1].truncated and not t2.rows[-1].parsed
    assert (
        t3.reward == 0.0
        and len(t3.rows) == 3
        and [r.post_tool for r in t3.rows] == [False, True, True]
    )
    # each row's tokens sit where the history says: the prompt is everything before them
    for t in trajs:
        for row in t.rows:
            before = tok.decode(t.ids[: row.start], skip_special_tokens=True)
            assert row.post_tool == ("<r>" in before)
    rows = build_rows(trajs, group_advantages(torch.tensor([t.reward for t in trajs]), 2, 1e-6))
    assert rows.post_tool.tolist() == [r.post_tool for t in trajs for r in t.rows]
    assert rows.turn.tolist() == [k + 1 for t in trajs for k in range(len(t.rows))]
    assert torch.equal(rows.adv, torch.zeros(len(rows.adv)))  # both members of a group agree


def test_sampler_logps_match_a_full_forward(warm_model_dir: str) -> None:
    cfg = small(sampler_dtype="float32")
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    env = envs.get("mul")
    rng = random.Random(5)
    prompts = [encode(tok, env.sample_task(rng).prompt, first=True) for _ in range(6)]
    prompts[0] = prompts[0] + encode(
        tok, "<call>1*2</call>\n<r>2</r>\n", first=False
    )  # uneven lengths
    gens = sampler.generate(prompts, max_new_tokens=30, temperature=0.7, seed=1)
    for p, g in zip(prompts, gens, strict=True):
        seq = torch.tensor([p + g.ids])
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, :-1].float() / 0.7
        lp = torch.log_softmax(logits, -1).gather(-1, seq[0, 1:, None]).squeeze(-1)[len(p) - 1 :]
        assert torch.allclose(lp, torch.tensor(g.logps), atol=2e-5)
        text = tok.decode(g.ids)
        stopped = (
            text.endswith("</call>") or text.endswith("</answer>") or g.ids[-1] == tok.eos_token_id
        )
        assert g.truncated == (not stopped) and (not g.truncated or len(g.ids) == 30)


def test_dense_fp32_circuits_agree_at_step_1() -> None:
    res = next(iter(train(small(steps=1, sampler_dtype="float32"))))
    assert res.metrics[N.PROBS_DIFF_MEAN] < 1e-4
    assert res.step == 1
    assert set(res.distributions) <= {N.dist(s, r) for s in N.SLICES for r in N.RATIOS}


def test_compressed_gap_is_large_at_step_1() -> None:
    dense = next(iter(train(small(steps=1)))).metrics[N.PROBS_DIFF_MEAN]
    name, kw = QUICK_CODEC
    comp = next(iter(train(small(steps=1, compression=name, compression_kwargs=kw)))).metrics
    assert comp[N.PROBS_DIFF_MEAN] >= 0.1 and comp[N.PROBS_DIFF_MEAN] >= 20 * dense
    assert dense > 0  # bfloat16 sampler vs float32 trainer: small, not zero


def _comparable(m: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in m.items() if not k.startswith("perf/")}


@pytest.mark.slow
def test_first_three_steps_repeat_exactly_for_a_seed() -> None:
    cfg = small(seed=11, compression="quant", compression_kwargs={"bits": 2})
    a = [(r.step, _comparable(r.metrics), r.distributions) for r in train(cfg)]
    b = [(r.step, _comparable(r.metrics), r.distributions) for r in train(cfg)]
    assert [s for s, _, _ in a] == [1, 2, 3]
    assert a == b
    required = {
        N.SCORE_MEAN,
        N.ZERO_ADV_FRAC,
        N.CLIP_RATIO,
        N.RESPONSE_LENGTH_MEAN,
        N.PROBS_DIFF_MEAN,
        N.tail("text", "p95"),
        N.ess("text"),
        N.NUM_TURNS,
        N.PARSE_FAIL_FRAC,
        N.SUCCESS_RATE,
        N.TOOL_CALLS,
        N.PG_LOSS,
        N.ENTROPY,
        N.GRAD_NORM,
        N.KL_TO_REF,
        N.by_turn(N.PROBS_DIFF_MEAN, "1"),
        N.by_turn(N.ABS_LOG_RATIO_MEAN, "1"),
    }
    assert required <= set(a[0][1])
    c = [_comparable(r.metrics) for r in train(small(seed=12, steps=1))]
    assert c[0] != a[0][1]


def _rollout(cfg: Any, sampler: Sampler, tok: Any, *, tasks: int, seed: int) -> list[Any]:
    """``tasks`` tasks of ``cfg.env`` (drawn with ``seed``) x ``tasks`` trajectories each,
    sampled with ``seed``: 3 interactions, 48 tokens each, temperature 1."""
    env = envs.get(cfg.env)
    rng = random.Random(seed)
    return rollout(
        env,
        [env.sample_task(rng) for _ in range(tasks)],
        tasks,
        sampler,
        tok,
        max_interactions=3,
        token_budget=48,
        temperature=1.0,
        seed=seed,
    )


def _trainer(codec: str, strength: dict[str, Any], *, tasks: int, seed: int) -> Any:
    """A compressed trainer, its model and sampler, and one step's rollouts."""
    cfg = small(compression=codec, compression_kwargs=strength)
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    trainer = Trainer(cfg, model, int(tok.pad_token_id))
    return model, sampler, trainer, _rollout(cfg, sampler, tok, tasks=tasks, seed=seed)


def test_a_train_step_changes_every_trainable_parameter() -> None:
    model, sampler, trainer, trajs = _trainer("quant", {"bits": 4}, tasks=4, seed=0)
    for i, t in enumerate(trajs):  # force non-degenerate groups
        t.reward = float(i % 2)
    rows = build_rows(trajs, group_advantages(torch.tensor([t.reward for t in trajs]), 4, 1e-6))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    metrics, _ = trainer.step(trajs, rows, torch.Generator().manual_seed(0))
    unchanged = [n for n, p in model.named_parameters() if torch.equal(before[n], p.detach())]
    assert not unchanged
    assert metrics[N.GRAD_NORM] > 0
    # the sampler is a separate copy: unchanged until synced, equal after
    sp = dict(sampler.model.named_parameters())
    name = next(iter(before))
    assert torch.equal(sp[name].float(), before[name].to(sp[name].dtype).float())
    sampler.sync(model)
    assert torch.equal(sp[name], dict(model.named_parameters())[name].detach().to(sp[name].dtype))


def test_trainer_logps_are_those_of_the_rows_prompts() -> None:
    """One forward over a whole trajectory = a forward over each row's own prompt."""
    _, _, trainer, trajs = _trainer("topk", {"keep": 0.1}, tasks=2, seed=3)
    with torch.no_grad():
        full, _ = token_logps(trainer.model, trajs, 0, 1.0, torch.device("cpu"))
        for i, t in enumerate(trajs):
            for row in t.rows:
                own, _ = token_logps(
                    trainer.model,
                    [type(t)(t.task, 0, t.ids[: row.start + row.length])],
                    0,
                    1.0,
                    torch.device("cpu"),
                )
                span = slice(row.start - 1, row.start - 1 + row.length)
                assert torch.allclose(full[i, span], own[0, span], atol=1e-5)


@pytest.mark.slow
def test_an_hf_model_directory_loads_and_runs_one_step(warm_model_dir: str, tmp_path: Path) -> None:
    d = tmp_path / "my-model"
    shutil.copytree(warm_model_dir, d)
    res = list(train(small(model=str(d), warm_start_steps=0, steps=1)))
    assert len(res) == 1 and res[0].metrics[N.NUM_TURNS] >= 1
    with pytest.raises(ValueError, match="local HF model directory"):
        list(train(small(model=str(tmp_path / "missing"), warm_start_steps=0, steps=1)))


def test_micro_batches_give_the_same_update() -> None:
    """Gradient accumulation over micro-batches = one forward/backward per minibatch.

    Compared on the gradient (one minibatch, dense: a codec's rounding and Adam's
    normalisation of near-zero gradients would both amplify float noise)."""
    import copy

    cfg = small(minibatches=1)
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    trajs = _rollout(cfg, sampler, tok, tasks=4, seed=1)
    for i, t in enumerate(trajs):
        t.reward = float(i % 3 == 0)
    rows = build_rows(trajs, group_advantages(torch.tensor([t.reward for t in trajs]), 4, 1e-6))
    results = []
    for micro in (None, 3):
        m = copy.deepcopy(model)
        c = small(minibatches=1, micro_batch=micro)
        metrics, _ = Trainer(c, m, int(tok.pad_token_id)).step(
            trajs, rows, torch.Generator().manual_seed(0)
        )
        results.append((metrics, {n: p.grad for n, p in m.named_parameters()}))
    (ma, pa), (mb, pb) = results
    for k in (N.PG_LOSS, N.KL_TO_REF, N.GRAD_NORM):
        assert ma[k] == pytest.approx(mb[k], rel=1e-4, abs=1e-6), k
    for n in pa:
        ga, gb = pa[n], pb[n]
        assert ga is not None and gb is not None
        assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-6), n


def test_a_shared_prefix_read_once_gives_the_same_logps_and_samples() -> None:
    """Worked examples every history shares are read once (their KV cache repeated), in
    the sampler and the trainer: the same tokens, the same log-probs, up to float
    summation order (float32 on both sides here)."""
    from gapwatch.workers import formats

    cfg = small(sampler_dtype="float32")
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    env = envs.get(cfg.env)
    fmt = formats.make(tok, env, shots=2)
    assert fmt.shared > 20
    rng = random.Random(5)
    tasks = [env.sample_task(rng) for _ in range(3)]
    prompts = [fmt.start(t) for t in tasks]
    once = sampler.generate(prompts, max_new_tokens=20, temperature=1.0, seed=3,
                            shared=fmt.shared)  # fmt: skip
    whole = sampler.generate(prompts, max_new_tokens=20, temperature=1.0, seed=3)
    for a, b in zip(once, whole, strict=True):
        assert a.ids == b.ids and a.truncated == b.truncated
        assert a.logps == pytest.approx(b.logps, abs=1e-4)
    trajs = rollout(env, tasks, 2, sampler, tok, max_interactions=3, token_budget=48,
                    temperature=1.0, seed=1, fmt=fmt)  # fmt: skip
    assert all(t.shared == fmt.shared for t in trajs)
    with torch.no_grad():
        shared, ent_s = token_logps(model, trajs, 0, 1.0, torch.device("cpu"))
        for t in trajs:
            t.shared = 0
        full, ent_f = token_logps(model, trajs, 0, 1.0, torch.device("cpu"))
    first = min(t.rows[0].start for t in trajs) - 1
    assert torch.allclose(shared[:, first:], full[:, first:], atol=1e-4)
    assert ent_s is not None and ent_f is not None
    assert torch.allclose(ent_s[:, first:], ent_f[:, first:], atol=1e-4)
    assert not shared[:, :first].any()  # no logits made for the prompt


def test_train_layers_trains_the_top_layers_only() -> None:
    from gapwatch.workers.loop import freeze_below

    cfg = small(train_layers=1, minibatches=1)
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    trajs = _rollout(cfg, sampler, tok, tasks=4, seed=2)
    for i, t in enumerate(trajs):
        t.reward = float(i % 2)
    rows = build_rows(trajs, group_advantages(torch.tensor([t.reward for t in trajs]), 4, 1e-6))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    Trainer(cfg, model, int(tok.pad_token_id)).step(trajs, rows, torch.Generator().manual_seed(0))
    moved = {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}
    top = len(model.model.layers) - 1
    assert moved and all(n.startswith((f"model.layers.{top}.", "model.norm.")) for n in moved)
    with pytest.raises(ValueError, match="train_layers must be 1..4"):
        freeze_below(model, 5)
