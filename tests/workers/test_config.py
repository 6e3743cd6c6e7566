"""RunConfig: presets, validation, one-line errors naming the valid choices."""

from __future__ import annotations

import pytest

from gapwatch.store import identity
from gapwatch.workers import RunConfig, codecs, envs, samplers


def test_presets() -> None:
    q = RunConfig.preset("quick")
    assert q.model == "tiny" and q.token_budget <= 64 and q.max_interactions <= 5
    large = RunConfig.preset("large")
    assert large.token_budget == 512 and large.max_interactions == 50 and large.sampler == "vllm"
    assert RunConfig.from_dict({}) == q


def test_unknown_key_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown key 'stepz'; valid: name, env, env_kwargs"):
        RunConfig.from_dict({"stepz": 3})


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("env", "chess", "unknown env 'chess'; valid: add_chain, mul, mul_chain"),
        ("compression", "zip", "unknown compression 'zip'; valid: none, quant, topk"),
        ("sampler", "sglang", "unknown sampler 'sglang'; valid: torch, vllm"),
        ("correction", "magic", "magic"),
        ("preset", "huge", "unknown preset 'huge'; valid: quick, long, large, smollm2"),
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
    def ident(**over: object) -> identity.RunIdentity:
        return identity.of_config(RunConfig.from_dict(over).to_dict())

    dense = ident(seed=3, name="dense")
    comp = ident(seed=3, name="comp", compression="quant", compression_kwargs={"bits": 2})
    other = ident(seed=4)
    assert dense.run_role == "control" and comp.run_role == "treatment"
    assert dense.pair_key == comp.pair_key != other.pair_key
    assert dense.unique_key != comp.unique_key


def test_where_a_run_ran_is_not_part_of_its_identity() -> None:
    run = RunConfig.preset("quick", seed=3).to_dict()
    placed = {**run, "device": "cuda", "placement": {"node_id": "n1", "gpu_ids": ["1"]}}
    assert identity.of_config(placed) == identity.of_config(run)


def test_configs_are_resolved_so_equal_strategies_label_alike() -> None:
    short = RunConfig.preset("quick", compression="topk", correction="tis")
    spelt = RunConfig.preset(
        "quick", compression="topk", compression_kwargs={"keep": 0.25}, correction="tis",
        correction_kwargs={"C": 2},
    )  # fmt: skip
    assert short.correction_kwargs == {"C": 2.0} and short.compression_kwargs == {"keep": 0.25}
    assert short == spelt
    ids = identity.of_config(short.to_dict())
    assert (ids.compression_label, ids.correction_label) == ("topk(keep=0.25)", "tis(C=2)")


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ({"lr": True}, "lr: expected a number, got true"),
        ({"steps": 2.5}, "steps: .*integer"),
        ({"correction": "tis", "correction_kwargs": {"Cx": 2}}, "unknown key 'Cx'; valid: C, veto"),
    ],
)
def test_numbers_and_thresholds_are_checked_like_any_field(
    bad: dict[str, object], pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        RunConfig.from_dict(bad)


def test_yaml_exponent_strings_are_numbers() -> None:
    assert RunConfig.from_dict({"lr": "2e-4"}).lr == 2e-4


def test_public_api_is_pinned() -> None:
    from gapwatch import workers

    assert workers.__all__ == ["RunConfig", "StepResult", "train"]
    assert callable(workers.train) and workers.StepResult.__name__ == "StepResult"
