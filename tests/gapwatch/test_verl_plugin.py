"""gapwatch's verl plug-in against the real ``verl`` package's ``DataProto`` on CPU: its
figures equal the built-in diagnostics' on the same tensors, the slices follow verl's
multi-turn masks, ``install()`` adds the figures to verl's own ``compute_data_metrics``,
and a missing verl is one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gapwatch.correction import diagnostics
from gapwatch.correction import names as N

verl = pytest.importorskip("verl")


def _batch(seed: int = 0, *, tools: bool = True) -> tuple[object, dict[str, torch.Tensor]]:
    """A verl batch of B rows, P prompt and T response tokens: rows 0-2 call a tool (its
    response at positions 5-8: valid, response_mask 0), row 3 does not; right padding."""
    g = torch.Generator().manual_seed(seed)
    B, P, T = 4, 3, 16
    resp_len = torch.tensor([16, 12, 14, 9])
    valid = (torch.arange(T)[None] < resp_len[:, None]).long()  # (B, T)
    response_mask = valid.clone()
    if tools:
        response_mask[:3, 5:9] = 0  # tool-response tokens
    old = -torch.rand((B, T), generator=g) * 3
    t = {
        "prompts": torch.ones((B, P), dtype=torch.long),
        "responses": torch.ones((B, T), dtype=torch.long),
        "attention_mask": torch.cat([torch.ones((B, P), dtype=torch.long), valid], dim=1),
        "response_mask": response_mask,
        "old_log_probs": old,
        "rollout_log_probs": old + torch.randn((B, T), generator=g) * 0.3,
        "ref_log_prob": old + torch.randn((B, T), generator=g) * 0.1,
        "token_level_scores": torch.zeros((B, T)),
        "token_level_rewards": torch.zeros((B, T)),
        "advantages": torch.randn((B, T), generator=g),
        "returns": torch.randn((B, T), generator=g),
    }
    return verl.DataProto.from_dict(tensors=t), t


def test_the_plugins_figures_equal_the_builtin_diagnostics_on_the_same_tensors() -> None:
    from gapwatch.integrations.verl import gap_metrics, slices

    batch, t = _batch()
    mask, post = slices(batch)
    want_post = torch.zeros((4, 16), dtype=torch.bool)
    want_post[0, 9:16], want_post[1, 9:12], want_post[2, 9:14] = True, True, True
    assert torch.equal(post, want_post)  # the model's tokens after the tool response
    assert torch.equal(mask, t["response_mask"].bool())
    figs, dists = gap_metrics(batch)
    want, sk = diagnostics.analyze(t["old_log_probs"], t["rollout_log_probs"], mask,
                                   post_tool=want_post)  # fmt: skip
    drift, dsk = diagnostics.drift(t["old_log_probs"], t["ref_log_prob"], mask,
                                   ratio="ref_drift", post_tool=want_post)  # fmt: skip
    for k, v in {**want, **drift}.items():
        assert figs[k] == pytest.approx(v, rel=1e-12, abs=1e-12), k
    assert N.tail("post_tool", "p95") in figs and N.ess("post_tool") in figs
    assert dists == {**diagnostics.payloads(sk), **diagnostics.payloads(dsk, "ref_drift")}
    n_post = int(want_post.sum())
    assert figs[N.POST_TOOL_TOKEN_FRAC] == pytest.approx(n_post / int(mask.sum()))


def test_a_batch_without_rollout_log_probs_gives_nothing_and_no_tool_is_all_text() -> None:
    from gapwatch.integrations.verl import gap_metrics

    batch, _ = _batch(tools=False)
    figs, _ = gap_metrics(batch)
    assert N.tail("text", "p95") in figs and N.tail("post_tool", "p95") not in figs
    batch.batch.pop("rollout_log_probs")
    assert gap_metrics(batch) == ({}, {})


def test_install_adds_gapwatchs_figures_to_verls_compute_data_metrics(
    tmp_path, monkeypatch
) -> None:
    import importlib
    import json

    from gapwatch.integrations.verl import install

    metric_utils = importlib.import_module("verl.trainer.ppo.metric_utils")
    original = metric_utils.compute_data_metrics
    monkeypatch.setenv("GAPWATCH_VERL_DISTS", str(tmp_path / "dists.jsonl"))
    try:
        patched = install()
        assert "verl.trainer.ppo.metric_utils" in patched
        assert install() == patched  # idempotent: wrapped once
        batch, _ = _batch()
        batch.meta_info["global_steps"] = 7
        metrics = metric_utils.compute_data_metrics(batch, use_critic=False)
        assert "critic/score/mean" in metrics  # verl's own figures kept
        assert metrics[N.tail("post_tool", "p95")] > 0  # gapwatch's beside them
        (line,) = (tmp_path / "dists.jsonl").read_text().splitlines()
        row = json.loads(line)
        assert row["step"] == 7 and N.dist("post_tool") in row["distributions"]
    finally:
        for name in ("verl.trainer.ppo.metric_utils", "verl.trainer.ppo.ray_trainer"):
            mod = sys.modules.get(name)
            if mod is not None and hasattr(mod, "compute_data_metrics"):
                mod.compute_data_metrics = original


def test_install_without_verl_is_one_line() -> None:
    code = (
        "import sys; sys.modules['verl'] = None\n"
        "from gapwatch.integrations.verl import install\n"
        "try:\n    install()\nexcept ImportError as e:\n    print(e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    (line,) = res.stdout.splitlines()
    assert "pip install 'gapwatch[verl]'" in line
