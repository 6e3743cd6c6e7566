"""Rollouts: play G trajectories per task with the sampler, cut them into training rows.

A trajectory is one token sequence: the history a format writes (``workers.formats``: BOS +
prompt, or a chat model's turns with worked examples), then per interaction the emitted
action and (after a tool call) the tool's result as the format writes it. Each interaction is one training ROW whose
prompt is the whole history before it; its tokens are the action's. A row's slice is
``post_tool`` exactly when a tool result is already in its history, else ``text``.

Rows of a trajectory share one trainer forward over the trajectory's full sequence: for a
causal LM (and per-token codecs) the log-probs of a row's action tokens given its prompt
are exactly those positions of the full sequence's forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gapwatch.workers.envs import Env, Task
from gapwatch.workers.formats import Format, Plain
from gapwatch.workers.sampling import Sampler


@dataclass
class Row:
    """One interaction: a training row."""

    start: int
    """Index in the trajectory's ids of the action's first token."""
    length: int
    """Number of action tokens."""
    post_tool: bool
    """True iff a tool result precedes this action in the history."""
    truncated: bool
    """Cut at the token budget."""
    parsed: bool
    """The action parsed in the grammar."""


@dataclass
class Trajectory:
    """One episode of one task."""

    task: Task
    group: int
    """Index of the task within the step (trajectories of a group share a task)."""
    ids: list[int]
    shared: int = 0
    """Leading ids every trajectory of its batch has in common (``Format.shared``)."""
    rows: list[Row] = field(default_factory=list)
    sampler_logps: list[list[float]] = field(default_factory=list)
    """Per row: the sampler's log-prob of each action token."""
    reward: float = 0.0
    done: bool = False
    tool_calls: int = 0
    success: bool = False
    last_result: str | None = None
    """The last tool result seen (its text), if any."""
    answer: str | None = None
    """The body of the final answer, if the episode ended with a parseable one."""


def rollout(
    env: Env,
    tasks: list[Task],
    group_size: int,
    sampler: Sampler,
    tokenizer: Any,
    *,
    max_interactions: int,
    token_budget: int,
    temperature: float,
    seed: int,
    fmt: Format | None = None,
) -> list[Trajectory]:
    """Play ``group_size`` trajectories of each task, all interactions batched across them.
    ``fmt`` writes the histories (``workers.formats``; default: the env's plain text)."""
    fmt = Plain(tokenizer, env) if fmt is None else fmt
    trajs = [
        Trajectory(task, g, fmt.start(task), fmt.shared)
        for g, task in enumerate(tasks)
        for _ in range(group_size)
    ]
    for turn in range(max_interactions):
        active = [t for t in trajs if not t.done]
        if not active:
            break
        gens = sampler.generate(
            [t.ids for t in active],
            max_new_tokens=token_budget,
            temperature=temperature,
            seed=seed * 1_000 + turn,
            shared=fmt.shared,
        )
        for t, gen in zip(active, gens, strict=True):
            text = tokenizer.decode(gen.ids, skip_special_tokens=True)
            out = env.step(t.task, text, truncated=gen.truncated, calls=t.tool_calls)
            t.rows.append(
                Row(
                    len(t.ids),
                    len(gen.ids),
                    t.tool_calls > 0,
                    gen.truncated,
                    out.parsed is not None,
                )
            )
            t.sampler_logps.append(gen.logps)
            t.ids = t.ids + gen.ids
            if out.done:
                t.done, t.reward = True, out.reward
                t.success = out.reward == 1.0
                if out.parsed is not None and out.parsed.kind == "answer":
                    t.answer = out.parsed.body.strip()
            elif out.observation is not None:
                t.tool_calls += 1
                t.last_result = out.result
                t.ids = t.ids + fmt.after_tool(t.task, out.result or "", t.tool_calls)
    for t in trajs:
        t.done = True  # out of interactions: reward stays 0.0
    return trajs
