"""How an episode is written in tokens: plain text (the tiny model) or a chat model's turns.

The env says what happens (``workers.envs``: the task, the tool's result, the reward); a
format says how the history reads to the policy. The policy's own actions are the same
text in both (``<call>EXPR</call>``, ``<answer>N</answer>``): only what surrounds them
changes.

- :class:`Plain`: ``BOS + "Q:37*58\\n"``, each tool result appended as the env's
  observation text (``"\\n<r>2146</r>\\n"``). The tiny built-in model's format, unchanged
  since it was warm-started on it.
- :class:`Chat`: the tokenizer's own chat template. ``shots`` worked examples come first
  as turns (user: the task; assistant: a call; user: ``<result>N</result>``; ...;
  assistant: the answer), then the task as a user turn and the assistant's generation
  prompt. After a call the assistant's turn is closed, the tool's result is a user turn,
  and a new assistant turn opens: exactly what the template writes between two
  messages, found by rendering it (so any template that renders a message's content
  verbatim works; one that does not fails in one line).

:func:`make` picks ``Chat`` where the tokenizer has a chat template, else ``Plain``.

``shared`` is the number of leading tokens every history of a format has in common (the
template's system turn and the worked examples): built once by concatenation, so it is
exact, and a sampler and the trainer may compute its forward once per batch instead of
once per trajectory (``workers.samplers``, ``workers.loop``). ``Plain`` without worked
examples shares nothing (0).

The post-tool slice is unaffected by the format: a row is ``post_tool`` when a tool
result precedes it in its own episode (``workers.rollout``); worked examples are prompt.
"""

from __future__ import annotations

import random
from typing import Any, Final, Protocol

from gapwatch.workers.envs import Env, Task, calculator
from gapwatch.workers.tokens import encode

SHOTS_SEED: Final = 12_345
"""Seed of the worked examples' tasks: the same examples in every run, step and batch."""


class Format(Protocol):
    """What the rollout needs to write an episode's history in tokens."""

    tokenizer: Any
    shared: int
    """Leading tokens common to every history of this format (0: none)."""

    def start(self, task: Task) -> list[int]:
        """Token ids of a new episode's history, up to where the first action begins."""
        ...

    def after_tool(self, task: Task, result: str, calls: int) -> list[int]:
        """Token ids appended after a tool call (``calls``: this one included)."""
        ...


def worked_examples(env: Env, shots: int) -> list[Task]:
    """The ``shots`` tasks solved as worked examples (fixed: ``SHOTS_SEED``)."""
    rng = random.Random(SHOTS_SEED)
    return [env.sample_task(rng) for _ in range(shots)]


class Plain:
    """The env's text as it is; ``shots`` solved demonstrations before the task."""

    def __init__(self, tokenizer: Any, env: Env, shots: int = 0) -> None:
        self.tokenizer, self.env = tokenizer, env
        text = ""
        for ex in worked_examples(env, shots):
            text += ex.prompt
            for n, body in enumerate(env.demo_calls(ex), start=1):
                text += f"<call>{body}</call>" + env.observation(ex, calculator(body), n)
            text += f"<answer>{ex.answer}</answer>\n"
        self.prefix = encode(tokenizer, text, first=True) if shots else []
        self.shared = len(self.prefix)

    def start(self, task: Task) -> list[int]:
        return self.prefix + encode(self.tokenizer, task.prompt, first=not self.prefix)

    def after_tool(self, task: Task, result: str, calls: int) -> list[int]:
        return encode(self.tokenizer, self.env.observation(task, result, calls), first=False)


class Chat:
    """The tokenizer's chat template; ``shots`` worked examples as turns (module doc)."""

    def __init__(self, tokenizer: Any, env: Env, shots: int = 0) -> None:
        self.tokenizer, self.env = tokenizer, env
        self.examples: list[dict[str, str]] = []
        for ex in worked_examples(env, shots):
            self.examples.append({"role": "user", "content": ex.prompt.strip()})
            for n, body in enumerate(env.demo_calls(ex), start=1):
                self.examples += [
                    {"role": "assistant", "content": f"<call>{body}</call>"},
                    {"role": "user", "content": env.tool_message(ex, calculator(body), n)},
                ]
            self.examples.append({"role": "assistant", "content": f"<answer>{ex.answer}</answer>"})
        head = self._render(self.examples, generation=False) if self.examples else ""
        self.head = head
        self.prefix = self._ids(head)
        self.shared = len(self.prefix)

    def _render(self, messages: list[dict[str, str]], *, generation: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation
        )
        return str(text)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _after(self, head: str, full: str, what: str) -> str:
        if not full.startswith(head):
            raise ValueError(
                f"the chat template of this tokenizer does not render {what} as a "
                "continuation of the turns before it; gapwatch needs a template that writes "
                "each message's content verbatim (ChatML, Llama's, Qwen's)"
            )
        return full[len(head) :]

    def start(self, task: Task) -> list[int]:
        full = self._render(
            [*self.examples, {"role": "user", "content": task.prompt.strip()}], generation=True
        )
        return self.prefix + self._ids(self._after(self.head, full, "the task"))

    def after_tool(self, task: Task, result: str, calls: int) -> list[int]:
        # what the template writes between an assistant message and the next user message,
        # through to the next generation prompt (the action's own text is the policy's)
        user = {"role": "user", "content": task.prompt.strip()}
        action = "<call>X</call>"
        head = self._render([user], generation=True) + action
        full = self._render(
            [user, {"role": "assistant", "content": action},
             {"role": "user", "content": self.env.tool_message(task, result, calls)}],
            generation=True,
        )  # fmt: skip
        return self._ids(self._after(head, full, "a tool result"))


def has_chat_template(tokenizer: Any) -> bool:
    """Does ``tokenizer`` carry a chat template?"""
    return bool(getattr(tokenizer, "chat_template", None))


def make(tokenizer: Any, env: Env, shots: int = 0) -> Format:
    """``Chat`` where ``tokenizer`` has a chat template, else ``Plain``."""
    cls = Chat if has_chat_template(tokenizer) else Plain
    return cls(tokenizer, env, shots)
