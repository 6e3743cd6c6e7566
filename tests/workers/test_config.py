"""RunConfig: presets, validation, one-line errors naming the valid choices."""

from __future__ import annotations

import pytest

from workers import RunConfig, codecs, envs, samplers


def test_presets() -> None:
    q = RunConfig.preset("quick")
    assert q.model == "tiny" and q.token_budget <= 64 and q.max_interactions <= 5
    large = RunConfig.preset("large")
    assert large.token_budget == 512 and large.max_interactions == 50 and large.sampler == "vllm"
    assert RunConfig.from_dict({}) == q


def test_unknown_key_lists_valid_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown run config key\(s\) stepz; valid: preset, name, env"
    ):
        RunConfig.from_dict({"stepz": 3})


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("env", "chess", "unknown env 'chess'; valid: mul, mul_chain"),
        ("compression", "zip", "unknown compression 'zip'; valid: none, quant, topk"),
        ("sampler", "sglang", "unknown sampler 'sglang'; valid: torch, vllm"),
        ("correction", "magic", "magic"),
        ("preset", "huge", "unknown preset 'huge'; valid: quick, large"),
    ],
)
def test_unknown_names_list_registered_ones(key: str, value: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        RunConfig.from_dict({key: value})


@pytest.mark.parametrize(
    "bad",
    [
        {"group_size": 1},
        {"max_interactions": 51},
        {"token_budget": 0},
        {"compression": "quant", "compression_kwargs": {"bits": 5}},
        {"compression": "topk", "compression_kwargs": {"keep": 0}},
        {"compression_layers": 0},
        {"sampler_dtype": "int8"},
        {"old_logprobs": "both"},
        {"temperature": 0},
        {"correction": "tis", "correction_kwargs": {"C": "big"}},
    ],
)
def test_bad_values_fail_in_one_line(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError) as info:
        RunConfig.from_dict(bad)
    assert "\n" not in str(info.value)


def test_registries_are_the_name_source() -> None:
    assert envs.names() == sorted(envs.names())
    assert set(codecs.names()) == {"none", "quant", "topk"}
    assert samplers.names() == ["torch", "vllm"]


def test_role_and_pairing() -> None:
    dense = RunConfig.preset("quick", seed=3)
    comp = RunConfig.preset("quick", seed=3, compression="quant", compression_kwargs={"bits": 2})
    other = RunConfig.preset("quick", seed=4)
    assert dense.role == "control" and comp.role == "treatment"
    assert dense.pair_key() == comp.pair_key() != other.pair_key()
    assert dense.trial_id() != comp.trial_id()


def test_public_api_is_pinned() -> None:
    import workers

    assert workers.__all__ == ["RunConfig", "StepResult", "train"]
    assert callable(workers.train) and workers.StepResult.__name__ == "StepResult"
