"""Agentic tool-use environments: a registry, a fixed action grammar, and two tasks.

An episode is text. The prompt states a task; each interaction the policy writes one
action, either ``<call>EXPR</call>`` (the calculator tool evaluates ``EXPR``; its result is
appended to the history as ``\\n<r>RESULT</r>\\n``, a non-trainable observation) or
``<answer>TEXT</answer>`` (ends the episode). Rewards: 1.0 for a correct answer, 0.0 for
a wrong one (or for running out of interactions), and exactly ``FORMAT_PENALTY`` (-0.1)
for an unparseable action, which ends the episode. An action cut at the token budget is
unparseable whatever its text.

Built in (``names()``):
- ``mul``: ``Q:a*b`` with 2-digit factors. The tiny model cannot multiply, so it must call
  the tool with the question and copy the result into its answer (one tool call).
- ``mul_chain``: ``Q:a*b*c``. The calculator takes one operator per call, so the policy
  calls ``a*b``, then ``<that result>*c``, then answers (two tool calls).
- ``add_chain``: ``Q:a+d n12``, add ``d`` to ``a`` twelve times (8-12 by default, up to
  20), one addition per call, each call built from the previous call's result; the tool
  says how many additions are left. A long horizon: most of an episode's tokens are
  written after a tool result.

Not here: tokenisation and how a history reads to the policy (``formats.py``: plain text, or
a chat model's turns, where a tool result is a user turn ``<result>N</result>``), sampling,
batching (``rollout.py``). Each env also writes
synthetic demonstrations for the supervised warm start (``demonstration``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from gapwatch.workers.registry import Registry

FORMAT_PENALTY: Final = -0.1
"""Reward of an unparseable (or truncated) action; the episode ends there."""

STOP_STRINGS: Final = ("</call>", "</answer>")
"""Strings that end an action: a sampler stops a sequence at the first one it emits."""
_ACTION_RE: Final = re.compile(r"\s*<(call|answer)>([^<]*)</\1>\s*")
_EXPR_RE: Final = re.compile(r"\s*(\d{1,18})\s*([*+-])\s*(\d{1,18})\s*")


@dataclass(frozen=True)
class Action:
    """A parsed action: a tool call or a final answer, with its body text."""

    kind: Literal["call", "answer"]
    body: str


@dataclass(frozen=True)
class Task:
    """One task instance: the prompt text and the expected answer."""

    prompt: str
    answer: str
    operands: tuple[int, ...]


@dataclass(frozen=True)
class Outcome:
    """What the environment says about one action."""

    reward: float
    """Reward of the episode if ``done``, else 0.0."""
    done: bool
    observation: str | None
    """Tool result text to append to the history (only for a parseable call)."""
    result: str | None
    """The tool's result itself (``observation`` without its markup), for a call."""
    parsed: Action | None
    """The parsed action, or None if it was unparseable."""


def parse_action(text: str, *, truncated: bool = False) -> Action | None:
    """Parse one action in the fixed grammar; None if unparseable.

    The whole text (up to surrounding whitespace) must be exactly one ``<call>...</call>``
    or ``<answer>...</answer>``. A ``truncated`` action (cut at the token budget) is
    unparseable even if its text happens to match.
    """
    if truncated:
        return None
    m = _ACTION_RE.fullmatch(text)
    if m is None:
        return None
    kind: Literal["call", "answer"] = "call" if m.group(1) == "call" else "answer"
    return Action(kind, m.group(2))


def calculator(expr: str) -> str:
    """The tool: evaluate ``x*y``, ``x+y`` or ``x-y`` on non-negative integers; else ``ERR``."""
    m = _EXPR_RE.fullmatch(expr)
    if m is None:
        return "ERR"
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return str(a * b if op == "*" else a + b if op == "+" else a - b)


def observation_text(result: str) -> str:
    """How a tool result is appended to the history."""
    return f"\n<r>{result}</r>\n"


MISTAKES: Final = ("guess", "miscopy")
"""How a wrong demonstration is wrong (the envs' ``mistake`` argument):

- ``guess``: it answers at once without the tool (a wrong number of the answer's length),
  so the warm-started policy calls the tool on only part of the tasks and RL has one early,
  discrete decision to learn (call or guess). The default, by measurement on the tiny model
  (``mul``, 600 warm-start steps, 70% of demonstrations wrong, 8 seeds of the quick
  preset): tool calls per episode rise from 0.14-0.36 at step 1 to 0.91-0.95 over the last
  10 steps, task success from 0.09-0.23 to 0.50-0.62 (bench/ground_truth.py);
- ``miscopy``: the tool is used and one digit of the final answer is changed. RL must
  then sharpen every copied digit, which the tiny model does not do in 30 steps: the
  score wanders near its start (0.1-0.17 with 3-digit factors; 0.6 -> 0.68 with 2-digit),
  and without the KL anchor it decays to zero.
"""


class Env:
    """Base environment: sample tasks, score actions, write demonstrations."""

    name: str = "base"
    mistake: str = "guess"
    """How a wrong demonstration goes wrong (one of ``MISTAKES``)."""

    def sample_task(self, rng: random.Random) -> Task:
        """Draw one task."""
        raise NotImplementedError

    def demo_calls(self, task: Task) -> list[str]:
        """The tool-call bodies an ideal policy makes, in order."""
        raise NotImplementedError

    def observation(self, task: Task, result: str, calls: int) -> str:
        """The history text of a tool result, after ``calls`` calls (this one included)."""
        return observation_text(result)

    def tool_message(self, task: Task, result: str, calls: int) -> str:
        """A tool result as a chat turn's content (``workers.formats.Chat``), after ``calls``
        calls (this one included)."""
        return f"<result>{result}</result>"

    def step(self, task: Task, action_text: str, *, truncated: bool, calls: int = 0) -> Outcome:
        """Score one action: parse it, run the tool or check the answer. ``calls``: the
        episode's tool calls before this action."""
        action = parse_action(action_text, truncated=truncated)
        if action is None:
            return Outcome(FORMAT_PENALTY, True, None, None, None)
        if action.kind == "answer":
            reward = 1.0 if action.body.strip() == task.answer else 0.0
            return Outcome(reward, True, None, None, action)
        result = calculator(action.body)
        return Outcome(0.0, False, self.observation(task, result, calls + 1), result, action)

    def demonstration(
        self, task: Task, rng: random.Random, wrong_frac: float
    ) -> list[tuple[str, bool]]:
        """A demonstration episode as ``(text, trainable)`` segments.

        With probability ``wrong_frac`` it is wrong in the env's ``mistake`` way (a guess
        without the tool, or a miscopied answer), so a policy warm-started on these solves
        part of the tasks, leaving RL room.
        """
        segs: list[tuple[str, bool]] = [(task.prompt, False)]
        wrong = rng.random() < wrong_frac
        if wrong and self.mistake == "guess":
            segs.append((f"<answer>{_guess(task.answer, rng)}</answer>", True))
            return segs
        result = ""
        for n, body in enumerate(self.demo_calls(task), start=1):
            segs.append((f"<call>{body}</call>", True))
            result = calculator(body)
            segs.append((self.observation(task, result, n), False))
        answer = _miscopy(result, rng) if wrong else result
        segs.append((f"<answer>{answer}</answer>", True))
        return segs


def _guess(answer: str, rng: random.Random) -> str:
    """A number of ``answer``'s length that is not ``answer`` (what a policy without the tool says)."""
    while True:
        g = str(rng.randint(10 ** (len(answer) - 1), 10 ** len(answer) - 1))
        if g != answer:
            return g


def _check_mistake(mistake: str) -> None:
    if mistake not in MISTAKES:
        raise ValueError(f"env mistake must be one of {', '.join(MISTAKES)}, got {mistake!r}")


def _miscopy(s: str, rng: random.Random) -> str:
    """``s`` with one digit replaced by a different digit."""
    i = rng.randrange(len(s))
    d = rng.choice([c for c in "0123456789" if c != s[i]])
    return s[:i] + d + s[i + 1 :]


_REGISTRY: Registry[Env] = Registry("environment", unknown_label="env")
register = _REGISTRY.register
names = _REGISTRY.names
"""Sorted names of the registered environments."""


def get(name: str, **kwargs: Any) -> Env:
    """Build the environment ``name``; unknown names or arguments fail in one line."""
    return _REGISTRY.build(name, "env_kwargs", **kwargs)


def _check_digits(lo: int, hi: int) -> None:
    if not 1 <= lo <= hi <= 9:
        raise ValueError(
            f"env digits must satisfy 1 <= min_digits <= max_digits <= 9, got {lo}, {hi}"
        )


def _number(rng: random.Random, lo: int, hi: int) -> int:
    d = rng.randint(lo, hi)
    return rng.randint(10 ** (d - 1), 10**d - 1)


@register("mul")
class MulEnv(Env):
    """``Q:a*b``: one tool call, then copy its result into the answer.

    Factors have ``min_digits`` to ``max_digits`` digits. The default, 2-digit factors
    (products 100-9801), by measurement of the tiny model's 600-step warm start (256
    episodes at temperature 1): with 2-3 digit factors it copies the question into its
    call wrongly in about 65% of episodes (miscopy demonstrations, success 0.12), and with
    guess demonstrations it never learns to copy at all (success 0.00 after 600 and 0.01
    after 1200 warm-start steps); with 2-digit factors the copy sits at a fixed offset and
    is learnt (3% wrong calls with miscopy demonstrations, success 0.50; with 60% guesses,
    success 0.27). At 80% guesses even 2-digit copying is not learnt (score 0 from step 1).
    """

    name = "mul"

    def __init__(self, min_digits: int = 2, max_digits: int = 2, mistake: str = "guess") -> None:
        _check_digits(min_digits, max_digits)
        _check_mistake(mistake)
        self.min_digits, self.max_digits, self.mistake = min_digits, max_digits, mistake

    def sample_task(self, rng: random.Random) -> Task:
        a = _number(rng, self.min_digits, self.max_digits)
        b = _number(rng, self.min_digits, self.max_digits)
        return Task(f"Q:{a}*{b}\n", str(a * b), (a, b))

    def demo_calls(self, task: Task) -> list[str]:
        a, b = task.operands
        return [f"{a}*{b}"]


@register("mul_chain")
class MulChainEnv(Env):
    """``Q:a*b*c``: two tool calls (the calculator takes one operator), then answer.

    Its warm start and RL have not been measured with the tiny model (``mistake`` and the
    digits keep ``mul``'s choices by analogy); the GPU example uses it with a real model.
    """

    name = "mul_chain"

    def __init__(self, min_digits: int = 1, max_digits: int = 2, mistake: str = "guess") -> None:
        _check_digits(min_digits, max_digits)
        _check_mistake(mistake)
        self.min_digits, self.max_digits, self.mistake = min_digits, max_digits, mistake

    def sample_task(self, rng: random.Random) -> Task:
        a, b, c = (_number(rng, self.min_digits, self.max_digits) for _ in range(3))
        return Task(f"Q:{a}*{b}*{c}\n", str(a * b * c), (a, b, c))

    def demo_calls(self, task: Task) -> list[str]:
        a, b, c = task.operands
        return [f"{a}*{b}", f"{a * b}*{c}"]


@register("add_chain")
class AddChainEnv(Env):
    """``Q:a+d nKK``: add ``d`` to ``a`` ``KK`` times, one addition per tool call, then
    answer. Each call is ``<previous result>+d``, so every tool result is needed by the next
    call, and the tool says how many additions are left (``<r>128</r>07``: 128, 7 left; at
    ``00`` the last result is the answer). An episode is ``K`` calls and an answer, ``K``
    drawn from ``min_calls``..``max_calls`` (8-12 by default, up to 20): the post-tool
    slice is most of its tokens once the policy uses the tool, and almost none while it
    guesses. ``max_interactions`` must be at least ``max_calls + 1``.

    What the policy must learn, each copy at a fixed place (which the tiny model learns on
    ``mul``): the previous result (just after the last ``<r>``), ``d`` (in the last call), and
    whether the count after ``</r>`` is 0. Every number has 2 digits (``d`` is 2 to
    ``min(5, 89 // max_calls)``, ``a`` from 10 to ``99 - d_max * max_calls``; counts are
    zero-padded), so each copy sits at a fixed offset. By measurement of the tiny model's
    warm start (held-out episodes, temperature 1): 300 steps of 16 with results crossing
    from 2 to 3 digits and unpadded counts, calls after the width changed were miscopied
    (101 -> ``10+6``) and 8% of episodes succeeded; with every result of 3 digits, 400
    steps, 0%, the 3-digit copies and the answer's copy wrong; with 2 digits, 400 steps at
    50% guesses, 38% (the tool called in 56%, its result copied into 71% of answers after
    a call). The default range of calls is a choice for the CPU budget: an
    episode is about 30 tokens per call, and the torch sampler re-reads the whole history
    at each interaction, so a step's sampling cost grows with the square of the calls.
    """

    name = "add_chain"

    def __init__(self, min_calls: int = 8, max_calls: int = 12, mistake: str = "guess") -> None:
        if not 1 <= min_calls <= max_calls <= 20:
            raise ValueError(
                "env calls must satisfy 1 <= min_calls <= max_calls <= 20, got "
                f"{min_calls}, {max_calls}"
            )
        _check_mistake(mistake)
        self.min_calls, self.max_calls, self.mistake = min_calls, max_calls, mistake

    def sample_task(self, rng: random.Random) -> Task:
        d_max = min(5, 89 // self.max_calls)  # every result stays within 2 digits
        d = rng.randint(2, d_max)
        a = rng.randint(10, 99 - d_max * self.max_calls)
        k = rng.randint(self.min_calls, self.max_calls)
        return Task(f"Q:{a}+{d} n{k:02d}\n", str(a + k * d), (a, d, k))

    def demo_calls(self, task: Task) -> list[str]:
        a, d, k = task.operands
        return [f"{a + i * d}+{d}" for i in range(k)]

    def observation(self, task: Task, result: str, calls: int) -> str:
        left = max(0, task.operands[2] - calls)
        return f"\n<r>{result}</r>{left:02d}\n"

    def tool_message(self, task: Task, result: str, calls: int) -> str:
        left = max(0, task.operands[2] - calls)
        return f"<result>{result}</result> ({left} left)"
