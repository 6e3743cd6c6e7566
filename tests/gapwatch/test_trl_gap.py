"""GapGRPOTrainer inside a real ``trl.GRPOTrainer`` on CPU (the tiny built-in model, the
built-in ``mul`` episodes as TRL's ``rollout_func``): the split is right (no codec: no
mismatch; a codec: a large one), the loss's weights are the built-in worker's ``weigh()``
for every correction, TRL's own importance sampling gives the same weights as the
matching gapwatch strategy, and bad input is one line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from gapwatch.correction import names as N
from gapwatch.correction import strategies

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]


def _trainer(tmp_path: Path, *, codec: str = "none", dtype: str = "float32", **kw: Any) -> Any:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from gapwatch.integrations.trl import GapConfig, GapGRPOTrainer
    from gapwatch.integrations.trl_episodes import ToolEpisodes, episode_reward
    from gapwatch.workers import RunConfig
    from gapwatch.workers.model import ensure_warm_start

    torch.manual_seed(0)
    path = ensure_warm_start(RunConfig.preset("quick"))
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    episodes = ToolEpisodes(model, tok, sampler_dtype=dtype, seed=0)
    cfg = GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=16,
        num_generations=4, report_to=[], use_cpu=True, beta=kw.pop("beta", 0.0),
        max_completion_length=200, save_strategy="no", bf16=False, **kw.pop("args", {}),
    )  # fmt: skip
    strength = {"keep": 0.05} if codec == "topk" else {}
    return GapGRPOTrainer(
        model=model, args=cfg, reward_funcs=episode_reward, rollout_func=episodes,
        train_dataset=episodes.dataset(64, seed=0), processing_class=tok,
        gap=GapConfig(codec=codec, codec_kwargs=strength, **kw),
    )  # fmt: skip


def _batch(trainer: Any, n: int = 16) -> list[dict[str, Any]]:
    prompts = list(trainer.train_dataset["prompt"])[: n // 4]
    return [{"prompt": p} for p in prompts for _ in range(4)]


@pytest.mark.slow
def test_no_codec_no_mismatch_and_a_codec_a_large_one_post_tool_too(tmp_path: Path) -> None:
    dense = _trainer(tmp_path)
    dense.train()  # one step: generation, the loss's forward (pi_trainer), the log
    (figs,) = [h for h in dense.state.log_history if N.PROBS_DIFF_MEAN in h]
    # the dense trainer forward and the float32 sampler agree to float32 rounding
    for s in N.SLICES:
        assert figs[N.tail(s, "max")] < 1e-4, (s, figs[N.tail(s, "max")])
    assert figs[N.POST_TOOL_TOKEN_FRAC] > 0.0  # the episodes call the tool: a post-tool slice
    dists = dense.pop_distributions()
    assert set(dists) == {N.dist("text"), N.dist("post_tool")}
    assert dense.pop_distributions() == {}  # popped once

    comp = _trainer(tmp_path, codec="topk", beta=0.05)
    comp.train()
    (figs,) = [h for h in comp.state.log_history if N.PROBS_DIFF_MEAN in h]
    assert N.tail("post_tool", "p95", "ref_drift") in figs  # TRL has a reference: its drift
    assert figs[N.tail("text", "p95")] > 0.5 and figs[N.tail("post_tool", "p95")] > 0.5
    assert figs[N.PROBS_DIFF_MEAN] > 0.3


def test_the_step_figures_are_those_of_the_whole_step_not_means_of_its_parts(
    tmp_path: Path,
) -> None:
    from gapwatch.correction import diagnostics

    trainer = _trainer(tmp_path, codec="topk", args={"gradient_accumulation_steps": 2,
                                                     "steps_per_generation": 2})  # fmt: skip
    g = torch.Generator().manual_seed(0)
    parts = []
    for width in (7, 5):  # two micro-batches, padded to different widths
        lt, ls = -torch.rand((3, width), generator=g) * 3, -torch.rand((3, width), generator=g) * 3
        mask, post = (
            torch.rand((3, width), generator=g) > 0.2,
            torch.rand((3, width), generator=g) > 0.5,
        )
        trainer._pending["train"].append((lt, ls, mask, post, None))
        parts.append((lt, ls, mask, post))
    figs = trainer._figures("train")
    pad = lambda x: torch.nn.functional.pad(x, (0, 7 - x.shape[1]))  # noqa: E731
    whole = [torch.cat([pad(p[i]) for p in parts]) for i in range(4)]
    want = diagnostics.summarize(whole[0], whole[1], whole[2], post_tool=whole[3])
    for k, v in want.items():
        assert figs[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert trainer._figures("train") == {}  # taken once


@pytest.mark.slow
def test_the_losss_weights_are_the_builtin_weigh_for_every_correction(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, codec="topk", dtype="bfloat16", beta=0.05)
    trainer.model.train()
    base = trainer._generate_and_score_completions(_batch(trainer))
    assert base["advantages"].dim() == 1  # correction none: TRL's own advantages untouched
    lt = trainer._logps(base, codec_on=True)  # pi_trainer on the same tokens
    ls = base["old_per_token_logps"]  # the sampler's (old_logprobs="sampler")
    mask = (base["completion_mask"] * base["tool_mask"]).bool()
    adv = torch.linspace(-1.5, 1.5, lt.shape[0])  # every sign and size of advantage
    for name in strategies.names():
        strategy = strategies.get(name)
        trainer.gap = replace(trainer.gap, correction=name)
        trainer.correct = strategy
        out = {**base, "advantages": adv.clone()}
        trainer._weigh(out, lt)
        want = strategies.weigh(strategy, lt, ls, mask).weights  # the built-in worker's
        got = out["advantages"] if name != "none" else adv[:, None] * mask
        if name == "none":
            assert torch.equal(out["advantages"], adv), name
            continue
        torch.testing.assert_close(got * mask, adv[:, None] * want, msg=name)


TRL_MODES = [
    ("token_truncate", None, 3.0, "tis", {"C": 3.0}),
    ("token_mask", 0.5, 3.0, "icepop", {"lo": 0.5, "hi": 3.0}),
    ("sequence_truncate", None, 3.0, "seq_tis", {"C": 3.0}),
    ("sequence_mask", 0.5, 3.0, "sequence_mask", {"lo": 0.5, "hi": 3.0}),
]


@pytest.mark.slow
def test_trls_own_importance_sampling_gives_the_matching_strategys_weights(
    tmp_path: Path,
) -> None:
    from trl import GRPOTrainer

    trainer = _trainer(tmp_path, codec="topk", dtype="bfloat16")
    trainer.model.train()
    # Seam: TRL computes its IS weights only with vLLM on; its rollout_func path needs no
    # vLLM engine once the weights count as synced, so TRL's own code runs here as is.
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    trainer._last_loaded_step = trainer.state.global_step
    for mode, lo, hi, name, params in TRL_MODES:
        trainer.vllm_importance_sampling_mode = mode
        trainer.vllm_importance_sampling_clip_min = lo
        trainer.vllm_importance_sampling_clip_max = hi
        out = GRPOTrainer._generate_and_score_completions(trainer, _batch(trainer))
        mask = (out["completion_mask"] * out["tool_mask"]).bool()
        lt, ls = out["old_per_token_logps"], out["sampling_per_token_logps"]
        theirs = out["importance_sampling_ratio"].expand_as(lt)
        ours, _ = strategies.get(name, **params)(lt, ls, mask)
        torch.testing.assert_close(theirs * mask, ours, msg=mode)
        assert (ours[mask] != 1.0).any(), mode  # a real correction, not the identity


def test_bad_names_and_a_trl_without_the_hooks_are_one_line() -> None:
    from gapwatch.integrations.trl import GapConfig, TRLHooksMissing
    from gapwatch.integrations.trl_gap import require_hooks

    with pytest.raises(ValueError, match="unknown compression 'nope'") as e1:
        GapConfig(codec="nope")
    with pytest.raises(ValueError, match="nope") as e2:
        GapConfig(correction="nope")
    with pytest.raises(ValueError, match="old_logprobs"):
        GapConfig(old_logprobs="both")  # type: ignore[arg-type]

    class OldTRL:  # a GRPOTrainer before rollout_func and per-token advantages
        def __init__(self, model: Any, args: Any) -> None: ...

    with pytest.raises(TRLHooksMissing, match="trl>=1.16") as e3:
        require_hooks(OldTRL)
    for e in (e1, e2, e3):
        assert "\n" not in str(e.value)


def test_the_example_says_a_bad_name_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script as a user runs it (a process of its own), then its ``main`` in this
    process for the other name (the same code path, without a second TRL import)."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trl_gap.py"), "--steps", "1", "--codec", "nope"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "unknown compression 'nope'" in lines[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr

    spec = importlib.util.spec_from_file_location("trl_gap_main", ROOT / "examples" / "trl_gap.py")
    assert spec and spec.loader
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.chdir(tmp_path)
    assert example.main(["--steps", "1", "--correction", "nope"]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "nope" in lines[0], err[-2000:]


def test_post_tool_is_the_models_tokens_after_the_first_tool_result() -> None:
    from gapwatch.integrations.trl_gap import post_tool_mask

    valid = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]])
    tool = torch.tensor([[1, 1, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    post = post_tool_mask(valid, tool)
    assert post.tolist() == [
        [False, False, False, False, True, True, False],  # tool result at 2-3; pad at 6
        [False] * 7,  # no tool call: all text
    ]
    assert not post_tool_mask(valid, None).any()


@pytest.mark.slow
def test_trls_own_generation_samples_dense_and_the_trainer_learns_compressed(
    tmp_path: Path,
) -> None:
    """No rollout_func: TRL's transformers generation runs with the codec off, the sampler's
    log-probs come from a dense forward, the trainer's through the codec."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from gapwatch.integrations.trl import GapConfig, GapGRPOTrainer
    from gapwatch.workers import RunConfig
    from gapwatch.workers.model import ensure_warm_start

    path = ensure_warm_start(RunConfig.preset("quick"))
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    prompts = Dataset.from_list([{"prompt": f"Q:{10 + i}*{20 + i}\n"} for i in range(16)])

    def first_figures(codec: str) -> dict[str, float]:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        cfg = GRPOConfig(
            output_dir=str(tmp_path / codec), max_steps=1, per_device_train_batch_size=8,
            num_generations=4, max_completion_length=12, report_to=[], use_cpu=True,
            bf16=False, save_strategy="no",
        )  # fmt: skip
        strength = {"keep": 0.05} if codec == "topk" else {}
        trainer = GapGRPOTrainer(
            model=model, args=cfg, processing_class=tok, train_dataset=prompts,
            reward_funcs=lambda completions, **_: [float(len(c)) for c in completions],
            gap=GapConfig(codec=codec, codec_kwargs=strength),
        )  # fmt: skip
        trainer.train()
        (figs,) = [h for h in trainer.state.log_history if N.PROBS_DIFF_MEAN in h]
        return figs

    assert first_figures("none")[N.tail("text", "max")] < 1e-4
    assert first_figures("topk")[N.PROBS_DIFF_MEAN] > 0.3
