"""The long-horizon env (``add_chain``): every call needs the previous result, the tool
counts down, the post-tool slice is most of an episode; and its preset validates."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gapwatch.workers import RunConfig, envs
from gapwatch.workers.config import PRESETS
from gapwatch.workers.model import build_tokenizer, encode
from gapwatch.workers.rollout import rollout
from gapwatch.workers.sampling import Generation
from gapwatch.workers.validation import ConfigError


def play(env: envs.Env, task: envs.Task, actions: list[str]) -> list[envs.Outcome]:
    """Feed ``actions`` to the env as the rollout does (``calls``: the calls so far)."""
    outs = []
    for calls, a in enumerate(actions):  # every action but the last is a call
        out = env.step(task, a, truncated=False, calls=calls)
        outs.append(out)
        if out.done:
            break
    return outs


def test_a_demonstration_is_a_chain_of_calls_each_built_on_the_last_result() -> None:
    env = envs.get("add_chain")
    rng = random.Random(0)
    seen = set()
    for _ in range(50):
        task = env.sample_task(rng)
        a, d, k = task.operands
        seen.add(k)
        segs = env.demonstration(task, rng, 0.0)
        assert [t for _, t in segs] == [False] + [True, False] * k + [True]
        actions = [text for text, trainable in segs if trainable]
        outs = play(env, task, actions)
        assert len(outs) == k + 1 and outs[-1].reward == 1.0
        for i, out in enumerate(outs[:-1]):  # the observation the demonstration shows
            assert out.observation == segs[2 + 2 * i][0]
            assert out.result == str(a + (i + 1) * d)
            assert out.observation.endswith(f"</r>{k - i - 1:02d}\n")
            assert len(out.result) == 2  # every number at a fixed width
            if i + 1 < k:  # the next call starts from this result
                assert actions[i + 1].startswith(f"<call>{out.result}+{d}<")
    assert seen == set(range(8, 13))  # the default range, 8-12 calls


def test_stopping_early_or_miscopying_fails_and_the_count_stays_at_zero() -> None:
    env = envs.get("add_chain", min_calls=3, max_calls=3)
    task = env.sample_task(random.Random(1))
    a, d, _ = task.operands
    early = play(env, task, [f"<call>{a}+{d}</call>", f"<answer>{a + d}</answer>"])
    assert early[-1].reward == 0.0
    wrong = [f"<call>{a}+{d}</call>", f"<call>{a + d + 1}+{d}</call>", f"<call>1+{d}</call>"]
    outs = play(env, task, [*wrong, f"<answer>{1 + d}</answer>"])
    assert outs[-1].reward == 0.0 and outs[2].observation.endswith("</r>00\n")
    more = play(env, task, [*wrong, f"<call>1+{d}</call>"])
    assert more[-1].observation.endswith("</r>00\n")  # past the count: still 0 left


class Demo:
    """A sampler that plays each task's demonstration (every interaction, in order)."""

    def __init__(self, env: envs.Env, tok: Any) -> None:
        self.env, self.tok = env, tok

    def generate(self, prompts: list[list[int]], **_: Any) -> list[Generation]:
        out = []
        for p in prompts:
            hist = self.tok.decode(p, skip_special_tokens=True)
            a, rest = hist.removeprefix("Q:").split("+", 1)
            d, k = rest.split("\n", 1)[0].split(" n")
            task = envs.Task(hist.split("\n", 1)[0] + "\n", "", (int(a), int(d), int(k)))
            segs = self.env.demonstration(task, random.Random(0), 0.0)
            text = [t for t, trainable in segs if trainable][hist.count("<r>")]
            if text.startswith("<answer>"):  # the task's answer, as a + k d
                text = f"<answer>{int(a) + int(k) * int(d)}</answer>"
            ids = encode(self.tok, text, first=False)
            out.append(Generation(ids, [-0.1] * len(ids), False))
        return out

    def sync(self, model: Any) -> None:
        pass


def test_the_post_tool_slice_is_most_of_a_solved_episode() -> None:
    env, tok = envs.get("add_chain"), build_tokenizer()
    tasks = [env.sample_task(random.Random(s)) for s in range(4)]
    trajs = rollout(env, tasks, 2, Demo(env, tok), tok, max_interactions=14,
                    token_budget=48, temperature=1.0, seed=0)  # fmt: skip
    for t in trajs:
        k = t.task.operands[2]
        assert t.success and t.tool_calls == k and len(t.rows) == k + 1
        assert [r.post_tool for r in t.rows] == [False] + [True] * k
        post = sum(r.length for r in t.rows if r.post_tool) / sum(r.length for r in t.rows)
        assert post > 0.85


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_calls": 9, "max_calls": 8}, "1 <= min_calls <= max_calls <= 20, got 9, 8"),
        ({"max_calls": 21}, "1 <= min_calls <= max_calls <= 20"),
        ({"mistake": "nope"}, "env mistake must be one of guess, miscopy"),
        ({"steps": 3}, "bad env_kwargs for 'add_chain'"),
    ],
)
def test_bad_settings_are_one_line(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as exc:
        RunConfig.preset("long", env_kwargs=kwargs)
    assert "\n" not in str(exc.value)


def test_the_long_preset() -> None:
    cfg = RunConfig.preset("long")
    env = envs.get(cfg.env, **cfg.env_kwargs)
    assert isinstance(env, envs.AddChainEnv) and cfg.max_interactions >= env.max_calls + 1
    assert set(PRESETS["long"]) <= set(RunConfig.field_names())
    with pytest.raises(
        ConfigError, match="unknown preset 'longer'; valid: quick, long, large, smollm2"
    ):
        RunConfig.from_dict({"preset": "longer"})


def test_every_number_keeps_two_digits_up_to_twenty_calls() -> None:
    rng = random.Random(2)
    for lo, hi in ((8, 12), (18, 20), (1, 1)):
        env = envs.get("add_chain", min_calls=lo, max_calls=hi)
        for _ in range(200):
            a, d, k = env.sample_task(rng).operands
            assert lo <= k <= hi and 2 <= d <= 5
            assert all(10 <= a + i * d <= 99 for i in range(k + 1))
