"""The environments: grammar, tool, rewards, registry."""

from __future__ import annotations

import random

import pytest

from gapwatch.workers import envs
from gapwatch.workers.envs import FORMAT_PENALTY, calculator, parse_action


def test_parse_accepts_the_two_actions() -> None:
    assert parse_action("<call>12*34</call>") == envs.Action("call", "12*34")
    assert parse_action("  <answer>408</answer>\n") == envs.Action("answer", "408")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "408",
        "<call>12*34",  # never closed
        "<call>12*34</answer>",  # mismatched tags
        "x<answer>1</answer>",  # text before the action
        "<answer>1</answer>junk",  # text after it
        "<answer>1</answer><answer>2</answer>",  # two actions
        "<tool>1</tool>",
    ],
)
def test_parse_rejects_everything_else(text: str) -> None:
    assert parse_action(text) is None


def test_truncated_action_is_unparseable_even_if_it_matches() -> None:
    assert parse_action("<answer>408</answer>", truncated=True) is None
    env = envs.get("mul")
    task = env.sample_task(random.Random(0))
    out = env.step(task, f"<answer>{task.answer}</answer>", truncated=True)
    assert out.done and out.reward == FORMAT_PENALTY and out.parsed is None


def test_rewards_and_penalty_exact() -> None:
    env = envs.get("mul")
    task = env.sample_task(random.Random(1))
    assert env.step(task, f"<answer>{task.answer}</answer>", truncated=False).reward == 1.0
    assert env.step(task, "<answer>0</answer>", truncated=False).reward == 0.0
    bad = env.step(task, "<answer>1", truncated=False)
    assert bad.done and bad.reward == -0.1 and FORMAT_PENALTY == -0.1


def test_tool_call_returns_observation_and_continues() -> None:
    env = envs.get("mul")
    task = env.sample_task(random.Random(2))
    a, b = task.operands
    out = env.step(task, f"<call>{a}*{b}</call>", truncated=False)
    assert not out.done and out.reward == 0.0
    assert out.observation == f"\n<r>{a * b}</r>\n"
    assert env.step(task, "<call>what</call>", truncated=False).observation == "\n<r>ERR</r>\n"


def test_calculator() -> None:
    assert calculator("123*456") == "56088"
    assert calculator(" 7 + 5 ") == "12"
    assert calculator("9-10") == "-1"
    assert calculator("2*3*4") == "ERR"  # one operator per call
    assert calculator("abc") == "ERR"


def test_the_task_needs_the_tool_and_chain_needs_two_calls() -> None:
    rng = random.Random(3)
    chain = envs.get("mul_chain")
    task = chain.sample_task(rng)
    calls = chain.demo_calls(task)
    assert len(calls) == 2 and calculator(calls[1]) == task.answer
    mul = envs.get("mul")
    t = mul.sample_task(rng)
    assert len(t.answer) >= 3  # at least 2-digit by 2-digit: not in the tiny model's head


def test_demonstrations_miscopy_at_the_configured_rate() -> None:
    env = envs.get("mul", mistake="miscopy")
    rng = random.Random(4)
    wrong = 0
    for _ in range(400):
        task = env.sample_task(rng)
        segs = env.demonstration(task, rng, 0.35)
        assert [t for _, t in segs] == [False, True, False, True]
        wrong += segs[-1][0] != f"<answer>{task.answer}</answer>"
    assert 0.28 < wrong / 400 < 0.42


def test_demonstrations_guess_without_the_tool_at_the_configured_rate() -> None:
    env = envs.get("mul")  # the default mistake
    assert env.mistake == "guess"
    rng = random.Random(4)
    guesses = 0
    for _ in range(400):
        task = env.sample_task(rng)
        segs = env.demonstration(task, rng, 0.7)
        if len(segs) == 2:  # prompt, then an answer at once: a wrong guess of the right length
            guesses += 1
            guess = segs[1][0].removeprefix("<answer>").removesuffix("</answer>")
            assert [t for _, t in segs] == [False, True]
            assert guess != task.answer and len(guess) == len(task.answer)
        else:  # the tool, then its result copied exactly
            assert [t for _, t in segs] == [False, True, False, True]
            assert segs[-1][0] == f"<answer>{task.answer}</answer>"
    assert 0.63 < guesses / 400 < 0.77
    with pytest.raises(ValueError, match="env mistake must be one of guess, miscopy"):
        envs.get("mul", mistake="typo")


def test_registry_names_and_errors() -> None:
    assert {"mul", "mul_chain"} <= set(envs.names())
    with pytest.raises(ValueError, match="unknown env 'nope'; valid: .*mul"):
        envs.get("nope")
    with pytest.raises(ValueError, match="bad env_kwargs"):
        envs.get("mul", colour=1)
    with pytest.raises(ValueError, match="registered twice"):
        envs.register("mul")(envs.MulEnv)
