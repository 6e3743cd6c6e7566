"""A run taken up from a checkpoint yields exactly the steps an uninterrupted run yields."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from gapwatch.correction import names as N
from gapwatch.workers.loop import GRPORun

from .conftest import small

TIMING = (N.STEP_TIME, N.TOKENS_PER_S)


def _figures(results: list) -> list[dict[str, float]]:  # type: ignore[type-arg]
    return [{k: v for k, v in r.metrics.items() if k not in TIMING} for r in results]


@pytest.mark.slow
def test_a_restored_run_goes_on_exactly_as_an_uninterrupted_one(tmp_path: Path) -> None:
    cfg = small(steps=4, compression="quant", compression_kwargs={"bits": 2}, correction="tis")
    whole = list(GRPORun(cfg).steps())
    first = GRPORun(cfg)
    head = list(itertools.islice(first.steps(), 2))
    ckpt = first.save(tmp_path / "ckpt")
    assert first.done == 2 and (ckpt / "state.pt").is_file()
    again = GRPORun(cfg, resume=ckpt)
    assert again.done == 2
    tail = list(again.steps())
    assert [r.step for r in head + tail] == [1, 2, 3, 4]
    assert _figures(head + tail) == _figures(whole)  # every figure, bit for bit
    assert [r.distributions for r in tail] == [r.distributions for r in whole[2:]]


def test_a_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    a = GRPORun(small(steps=2))
    a.save(tmp_path / "a")
    with pytest.raises(ValueError, match="saved by a run of another config"):
        GRPORun(small(steps=2, lr=1e-3), resume=tmp_path / "a")
    with pytest.raises(ValueError, match="no readable checkpoint"):
        GRPORun(small(steps=2), resume=tmp_path / "nothing")
