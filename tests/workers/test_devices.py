"""Devices: a run asked onto a device this process cannot use fails with one line that
says why and what to do (a sweep with ``resources.gpus`` > 0 puts trials on cuda)."""

from __future__ import annotations

import pytest
import torch

from gapwatch.workers import devices, train

from .conftest import small


def test_cpu_and_a_bad_name() -> None:
    assert devices.require("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="'gpu0' is not a torch device; use cpu, cuda or cuda:N"):
        devices.require("gpu0")


def test_cuda_without_cuda_names_the_build_and_the_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(ValueError) as exc:
        devices.require("cuda")
    msg = str(exc.value)
    assert msg.startswith("device 'cuda' asked for but CUDA is not available (torch ")
    assert "CUDA_VISIBLE_DEVICES='1'" in msg and "use device: cpu" in msg and "\n" not in msg
    if torch.version.cuda is None:
        assert "a CPU-only build" in msg


def test_a_cuda_index_past_the_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices.require("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match=r"'cuda:2' asked for but only 2 CUDA device\(s\)"):
        devices.require("cuda:2")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_run_on_cuda_without_cuda_fails_before_loading_anything() -> None:
    with pytest.raises(ValueError, match="CUDA is not available") as exc:
        next(iter(train(small(device="cuda", model="/nonexistent/model"))))
    assert "\n" not in str(exc.value)
