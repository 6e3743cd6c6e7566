"""The vLLM sampler (GPU only): post-temperature log-probs that match the trainer's forward,
and weights that follow the trainer after ``sync``."""

from __future__ import annotations

import random

import pytest
import torch

from gapwatch.correction import names as N
from gapwatch.workers import envs, train
from gapwatch.workers.model import encode, load_policy

from .conftest import make_sampler, small

pytestmark = pytest.mark.gpu


def _cfg(**over: object):  # type: ignore[no-untyped-def]
    return small(sampler="vllm", device="cuda", sampler_dtype="float32", **over)


def test_vllm_logps_are_post_temperature_and_match_a_full_forward() -> None:
    pytest.importorskip("vllm")
    cfg = _cfg()
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    env = envs.get("mul")
    rng = random.Random(0)
    prompts = [encode(tok, env.sample_task(rng).prompt, first=True) for _ in range(8)]
    gens = sampler.generate(prompts, max_new_tokens=32, temperature=0.7, seed=0)
    for p, g in zip(prompts, gens, strict=True):
        seq = torch.tensor([p + g.ids], device="cuda")
        with torch.no_grad():
            logits = model(input_ids=seq).logits[0, :-1].float() / 0.7
        lp = torch.log_softmax(logits, -1).gather(-1, seq[0, 1:, None]).squeeze(-1)[len(p) - 1 :]
        assert torch.allclose(lp.cpu(), torch.tensor(g.logps), atol=1e-3)


def test_vllm_sync_pushes_the_trainers_weights() -> None:
    pytest.importorskip("vllm")
    cfg = _cfg()
    model, tok = load_policy(cfg)
    sampler = make_sampler(model, tok, cfg)
    prompt = [encode(tok, "Q:12*34\n", first=True)]
    before = sampler.generate(prompt, max_new_tokens=8, temperature=1.0, seed=0)[0]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    sampler.sync(model)
    after = sampler.generate(prompt, max_new_tokens=8, temperature=1.0, seed=0)[0]
    assert before.logps != after.logps


def test_a_vllm_run_reports_a_small_dense_gap() -> None:
    pytest.importorskip("vllm")
    res = next(iter(train(_cfg(steps=1))))
    assert res.metrics[N.PROBS_DIFF_MEAN] < 1e-2
