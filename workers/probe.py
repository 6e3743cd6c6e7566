"""How well a policy plays an environment, measured without updating it.

One measurement serves two checks:
- the **quality gate** of a warm start (``workers.model``): after the supervised pass the
  policy plays held-out tasks; below ``GATE`` it trains on, then fails in one line;
- the **preflight** of a sweep (``orchestrator.sweep.preflight``): before the grid is launched,
  the dense policy of each distinct model/env plays one batch; a policy that cannot score
  at all (tool never called, actions never parsed, answers never right) stops the sweep.

Call :func:`measure` with a sampler (``workers.samplers.make``) and get a :class:`Quality`.
Not here: anything that trains, and anything about compression (the probe is dense).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Final

from gapwatch.workers.envs import Env
from gapwatch.workers.formats import Format
from gapwatch.workers.rollout import rollout
from gapwatch.workers.sampling import Sampler

PROBE_SEED: Final = 987_654
"""Seed of the probe's task draws and sampling: far from the run seeds (0, 1, ...) and
the warm start's demonstration stream, so its tasks are held out in practice."""


@dataclass(frozen=True)
class Quality:
    """What a batch of episodes (one per task, temperature as configured) showed."""

    episodes: int
    success: float
    """Fraction of episodes answered correctly (the task reward)."""
    tool_calls: float
    """Fraction of episodes with at least one tool call."""
    copied: float
    """Of the episodes that called the tool and then answered, the fraction whose answer
    is the last tool result (the result copied correctly); 0 when there are none."""
    parsed: float
    """Fraction of episodes whose every action parsed."""
    score: float
    """Mean reward (success 1, wrong 0, unparseable -0.1)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """The figures in one line, as the gate and the preflight print them."""
        return (
            f"success {self.success:.0%}, tool called in {self.tool_calls:.0%}, result copied "
            f"in {self.copied:.0%} of answers after a call, all actions parsed in "
            f"{self.parsed:.0%} ({self.episodes} episodes)"
        )

    def why_not(self) -> str:
        """Why a policy that never scores cannot: the first thing that never happens."""
        if self.parsed == 0:
            return "no episode's actions parsed"
        if self.tool_calls == 0:
            return "the tool was never called"
        if self.copied == 0:
            return "the tool was called but its result never copied into the answer"
        return "no answer was right"


def measure(
    env: Env,
    sampler: Sampler,
    tokenizer: Any,
    *,
    episodes: int,
    max_interactions: int,
    token_budget: int,
    temperature: float,
    seed: int = PROBE_SEED,
    fmt: Format | None = None,
) -> Quality:
    """Play ``episodes`` tasks once each with ``sampler`` (no update) and summarise; ``fmt``
    writes the histories as the run does (``workers.formats``; default: plain text)."""
    rng = random.Random(seed)
    tasks = [env.sample_task(rng) for _ in range(episodes)]
    trajs = rollout(
        env,
        tasks,
        1,
        sampler,
        tokenizer,
        max_interactions=max_interactions,
        token_budget=token_budget,
        temperature=temperature,
        seed=seed,
        fmt=fmt,
    )
    after_call = [t for t in trajs if t.tool_calls > 0 and t.answer is not None]
    n = len(trajs)
    return Quality(
        episodes=n,
        success=sum(t.success for t in trajs) / n,
        tool_calls=sum(t.tool_calls > 0 for t in trajs) / n,
        copied=(
            sum(t.answer == t.last_result for t in after_call) / len(after_call)
            if after_call
            else 0.0
        ),
        parsed=sum(all(r.parsed for r in t.rows) for t in trajs) / n,
        score=sum(t.reward for t in trajs) / n,
    )
