"""The built-in calculator tasks as multi-turn TRL episodes: a ``rollout_func``.

``ToolEpisodes(model, tokenizer, env="mul")`` plays the built-in env's episodes
(``workers.envs``: ``mul``, the long ``add_chain``, ...) with a dense sampler
(``workers.samplers``: a copy of the policy's weights, synced from the trainer at every
call; vLLM on GPU) and hands TRL one completion per prompt: every action and every tool
result after the prompt, in order, with

- ``logprobs``: the sampler's log-prob of each action token (0 on tool-result tokens, which
  the loss never sees);
- ``env_mask``: 1 on action tokens, 0 on tool-result tokens (TRL's ``tool_mask``), so the
  post-tool slice is the model's tokens after the first tool result;
- ``gw_reward``: the episode's reward (1 right, 0 wrong, -0.1 unparseable), which
  :func:`episode_reward` returns as TRL's reward.

Why a ``rollout_func`` and not TRL's ``tools=``: TRL's tool loop needs a chat template with
tool-call parsing that the tiny character-level model does not have, and the built-in
env already plays exactly the episodes the built-in worker trains on (per-interaction
token budget, the format penalty, the tool's result appended to the history, a chat
model's template with worked examples: ``workers.formats``), so both paths measure the
same task. With TRL's ``shuffle_dataset=False`` and the worker's seed, step 1 plays the
very episodes the built-in worker's step 1 plays (the same tasks in the same order, the
same sampling seed). Episode figures (success, tool calls, parse failures, turns,
per-interaction lengths and clip ratio) go into the trainer's logs under gapwatch's names.

Use::

    episodes = ToolEpisodes(model, tok, env="mul", token_budget=48, max_interactions=3)
    trainer = GapGRPOTrainer(model=model, args=cfg, reward_funcs=episode_reward,
                             rollout_func=episodes, train_dataset=episodes.dataset(256, seed=0),
                             processing_class=tok, gap=GapConfig(codec="topk", ...))

Build it before the trainer: the sampler copies the weights while they are dense.
"""

from __future__ import annotations

import random
from typing import Any

from gapwatch.correction import names as N
from gapwatch.workers import envs, formats, samplers
from gapwatch.workers.envs import Task
from gapwatch.workers.rollout import Trajectory, rollout

__all__ = ["ToolEpisodes", "episode_reward"]


def episode_reward(completions: list[Any], gw_reward: list[float], **_: Any) -> list[float]:
    """TRL reward function: each episode's reward as the env scored it."""
    return [float(r) for r in gw_reward]


class ToolEpisodes:
    """A TRL ``rollout_func`` over a built-in env (module doc).

    Args:
        model, tokenizer: the policy (before any codec is attached) and its tokenizer.
        env, env_kwargs: a ``workers.envs`` name and its parameters.
        max_interactions, token_budget, temperature: as in ``workers.RunConfig``; use the
            trainer's ``temperature`` (TRL's log-probs divide by it too).
        sampler, sampler_dtype, device: the sampling engine (``torch`` or ``vllm``).
        seed: seeds the episodes' sampling (each call gets its own seed from it).
        shots: worked examples before each task (``workers.formats``: chat turns where the
            tokenizer has a chat template, as the built-in worker's ``shots``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        env: str = "mul",
        env_kwargs: dict[str, Any] | None = None,
        max_interactions: int = 3,
        token_budget: int = 48,
        temperature: float = 1.0,
        sampler: str = "torch",
        sampler_dtype: str = "bfloat16",
        device: str = "cpu",
        seed: int = 0,
        shots: int = 0,
    ) -> None:
        self.env = envs.get(env, **(env_kwargs or {}))
        self.tokenizer = tokenizer
        self.fmt = formats.make(tokenizer, self.env, shots)  # plain, or the chat template
        self.max_interactions, self.token_budget = max_interactions, token_budget
        self.temperature, self.seed = temperature, seed
        self.sampler = samplers.make(sampler, model, tokenizer, device=device, dtype=sampler_dtype,
                                     seed=seed, stops=envs.STOP_STRINGS)  # fmt: skip
        self.tasks: dict[str, Task] = {}
        self.calls = 0

    def dataset(self, n: int, seed: int) -> Any:
        """A ``datasets.Dataset`` of ``n`` task prompts (``{"prompt": text}``) drawn with
        ``seed``; the episodes look each task up by its prompt."""
        from datasets import Dataset

        rng = random.Random(seed)
        rows = []
        for _ in range(n):
            task = self.env.sample_task(rng)
            self.tasks[task.prompt] = task
            rows.append({"prompt": task.prompt})
        return Dataset.from_list(rows)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one episode per prompt (TRL repeats each prompt ``num_generations`` times)."""
        try:
            tasks = [self.tasks[str(p)] for p in prompts]
        except KeyError as exc:
            raise ValueError(
                f"prompt {str(exc.args[0])[:40]!r} is not one of this ToolEpisodes' tasks: "
                "build the train dataset with episodes.dataset(n, seed)"
            ) from None
        self.sampler.sync(trainer.accelerator.unwrap_model(trainer.model))
        self.calls += 1
        trajs = rollout(
            self.env, tasks, 1, self.sampler, self.tokenizer,
            max_interactions=self.max_interactions, token_budget=self.token_budget,
            temperature=self.temperature, seed=self.seed * 100_003 + self.calls, fmt=self.fmt,
        )  # fmt: skip
        out = to_trl(trajs)
        mode = "train" if trainer.model.training else "eval"
        figs = {**episode_figures(trajs), N.RESPONSE_BUDGET: float(self.token_budget)}
        for k, v in figs.items():
            trainer._metrics[mode][k].append(v)
        return out


def to_trl(trajs: list[Trajectory]) -> dict[str, Any]:
    """TRL's ``rollout_func`` fields of played trajectories (module doc)."""
    out: dict[str, list[Any]] = {
        "prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "gw_reward": [],
    }  # fmt: skip
    for t in trajs:
        start = t.rows[0].start  # the prompt ends where the first action begins
        logps = [0.0] * (len(t.ids) - start)
        env_mask = [0] * (len(t.ids) - start)
        for row, lps in zip(t.rows, t.sampler_logps, strict=True):
            at = row.start - start
            logps[at : at + row.length] = lps
            env_mask[at : at + row.length] = [1] * row.length
        out["prompt_ids"].append(t.ids[:start])
        out["completion_ids"].append(t.ids[start:])
        out["logprobs"].append(logps)
        out["env_mask"].append(env_mask)
        out["gw_reward"].append(t.reward)
    return out


def episode_figures(trajs: list[Trajectory]) -> dict[str, float]:
    """Per-interaction lengths and clip ratio, turns, parse failures, success, tool calls."""
    rows = [row for t in trajs for row in t.rows]
    n_rows, n_eps = max(1, len(rows)), max(1, len(trajs))
    return {
        N.RESPONSE_LENGTH_MEAN: sum(r.length for r in rows) / n_rows,
        N.RESPONSE_LENGTH_MAX: float(max((r.length for r in rows), default=0)),
        N.CLIP_RATIO: sum(r.truncated for r in rows) / n_rows,
        N.NUM_TURNS: len(rows) / n_eps,
        N.PARSE_FAIL_FRAC: sum(not r.parsed for r in rows) / n_rows,
        N.SUCCESS_RATE: sum(t.success for t in trajs) / n_eps,
        N.TOOL_CALLS: sum(t.tool_calls for t in trajs) / n_eps,
    }
