"""The torch sampler and the trainer on CUDA (GPU only): what test_loop.py checks on CPU,
on the GPU, in the dtypes the presets use. ``bench/gpu_check.sh`` runs these on a lent
GPU machine, which has no vLLM (test_vllm.py) and no Ray, store or pydantic beyond the
carried wheels: import only torch, transformers, pytest and gapwatch's workers here."""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch

from gapwatch.correction import names as N
from gapwatch.workers import codecs, devices, envs, train
from gapwatch.workers.config import QUICK_CODEC
from gapwatch.workers.loop import Trainer, build_rows, group_advantages, token_logps
from gapwatch.workers.model import encode, load_policy
from gapwatch.workers.rollout import rollout

from .conftest import make_sampler, small

pytestmark = pytest.mark.gpu


def _cuda(**over: object):  # type: ignore[no-untyped-def]
    return small(device="cuda", **over)


def _finite(metrics: dict[str, float]) -> list[str]:
    return [k for k, v in metrics.items() if not math.isfinite(v)]


def test_cuda_sampler_logps_match_a_full_forward() -> None:
    cfg = _cuda(sampler_dtype="float32")
    model, tok = load_policy(cfg)
    assert next(model.parameters()).device.type == "cuda"
    sampler = make_sampler(model, tok, cfg)
    env = envs.get("mul")
    rng = random.Random(5)
    prompts = [encode(tok, env.sample_task(rng).prompt, first=True) for _ in range(6)]
    prompts[0] = prompts[0] + encode(tok, "<call>1*2</call>\n<r>2</r>\n", first=False)
    gens = sampler.generate(prompts, max_new_tokens=30, temperature=0.7, seed=1)
    for p, g in zip(prompts, gens, strict=True):
        seq = torch.tensor([p + g.ids], device="cuda")
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, :-1].float() / 0.7
        lp = torch.log_softmax(logits, -1).gather(-1, seq[0, 1:, None]).squeeze(-1)[len(p) - 1 :]
        assert torch.allclose(lp.cpu(), torch.tensor(g.logps), atol=1e-4)
        assert not g.truncated or len(g.ids) == 30


def test_cuda_and_cpu_trainer_forwards_agree() -> None:
    cfg = small(sampler_dtype="float32")
    cpu_model, tok = load_policy(cfg)
    env = envs.get(cfg.env)
    rng = random.Random(2)
    trajs = rollout(
        env, [env.sample_task(rng) for _ in range(4)], 4, make_sampler(cpu_model, tok, cfg), tok,
        max_interactions=3, token_budget=48, temperature=1.0, seed=2,
    )  # fmt: skip
    gpu_model = copy.deepcopy(cpu_model).to("cuda")
    with torch.no_grad():
        lp_c, ent_c = token_logps(cpu_model, trajs, 0, 1.0, torch.device("cpu"))
        lp_g, ent_g = token_logps(gpu_model, trajs, 0, 1.0, torch.device("cuda"))
    assert ent_c is not None and ent_g is not None
    assert torch.allclose(lp_g.cpu(), lp_c, atol=1e-4)
    assert torch.allclose(ent_g.cpu(), ent_c, atol=1e-4)
    # the compressed forward: a value within rounding of a top-k edge may flip, so compare
    # on average
    name, kw = QUICK_CODEC
    for m in (cpu_model, gpu_model):
        codecs.attach(m, codecs.get(name, **kw))
    with torch.no_grad():
        lp_c, _ = token_logps(cpu_model, trajs, 0, 1.0, torch.device("cpu"))
        lp_g, _ = token_logps(gpu_model, trajs, 0, 1.0, torch.device("cuda"))
    assert torch.isfinite(lp_g).all()
    assert (lp_g.cpu() - lp_c).abs().mean() < 1e-2


def test_a_cuda_run_shows_the_cpu_gaps() -> None:
    fp32 = next(iter(train(_cuda(steps=1, sampler_dtype="float32")))).metrics
    assert fp32[N.PROBS_DIFF_MEAN] < 1e-4
    dense = next(iter(train(_cuda(steps=1)))).metrics  # bfloat16 sampler, as by default
    name, kw = QUICK_CODEC
    comp = next(iter(train(_cuda(steps=1, compression=name, compression_kwargs=kw)))).metrics
    for m in (fp32, dense, comp):
        assert not _finite(m), _finite(m)
    assert 0 < dense[N.PROBS_DIFF_MEAN] < 0.005  # CPU: 0.0008
    assert (
        comp[N.PROBS_DIFF_MEAN] >= 0.1 and comp[N.PROBS_DIFF_MEAN] >= 20 * dense[N.PROBS_DIFF_MEAN]
    )


def test_a_cuda_train_step_changes_every_parameter_and_syncs_the_sampler() -> None:
    cfg = _cuda(compression="quant", compression_kwargs={"bits": 4})
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    trainer = Trainer(cfg, model, int(tok.pad_token_id))
    env = envs.get(cfg.env)
    rng = random.Random(0)
    trajs = rollout(
        env, [env.sample_task(rng) for _ in range(4)], 4, sampler, tok,
        max_interactions=3, token_budget=48, temperature=1.0, seed=0,
    )  # fmt: skip
    for i, t in enumerate(trajs):  # force non-degenerate groups
        t.reward = float(i % 2)
    rows = build_rows(trajs, group_advantages(torch.tensor([t.reward for t in trajs]), 4, 1e-6))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics, _ = trainer.step(trajs, rows, torch.Generator().manual_seed(0))
    assert not _finite(metrics), _finite(metrics)
    assert [n for n, p in model.named_parameters() if torch.equal(before[n], p.detach())] == []
    sampler.sync(model)
    sp = dict(sampler.model.named_parameters())  # type: ignore[attr-defined]
    for n, p in model.named_parameters():
        assert sp[n].device.type == "cuda"
        assert torch.equal(sp[n], p.detach().to(sp[n].dtype))


def test_the_large_presets_dtypes_train_on_cuda() -> None:
    """bfloat16 trainer and sampler, ratio against the trainer, a small anchor: the large
    preset's numerics, on the tiny model."""
    cfg = _cuda(steps=2, trainer_dtype="bfloat16", old_logprobs="trainer", kl_coef=0.001)
    res = list(train(cfg))
    assert [r.step for r in res] == [1, 2]
    for r in res:
        assert not _finite(r.metrics), _finite(r.metrics)
    assert res[0].metrics[N.PROBS_DIFF_MEAN] < 0.05  # both engines bf16: rounding only


def test_a_cuda_device_that_is_not_there_is_one_line() -> None:
    n = torch.cuda.device_count()
    assert devices.require("cuda").type == "cuda"
    with pytest.raises(ValueError, match=f"only {n} CUDA device") as exc:
        devices.require(f"cuda:{n}")
    assert "\n" not in str(exc.value)
