"""Short CPU forwards run on one thread where OpenMP helpers sleep (models.text.network.serial), and give
the same embeddings as on every thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from models.text.network import serial


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def threads_inside(tokens: int, device: str = "cpu") -> int:
    with serial.threads_for(tokens, torch.device(device)):
        return torch.get_num_threads()


@pytest.mark.usefixtures("two_threads")
def test_short_forward_runs_on_one_thread_when_helpers_sleep(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert threads_inside(serial.SERIAL_MAX_TOKENS) == 1
    assert torch.get_num_threads() == 2  # restored
    assert threads_inside(serial.SERIAL_MAX_TOKENS + 1) == 2
    assert threads_inside(8, "meta") == 2  # not a CPU forward


@pytest.mark.usefixtures("two_threads")
@pytest.mark.parametrize("policy", [None, "ACTIVE"])
def test_spinning_helpers_keep_every_thread(monkeypatch, policy):
    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    assert threads_inside(8) == 2


@pytest.mark.usefixtures("two_threads")
def test_thread_count_restored_after_an_error(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    with pytest.raises(RuntimeError), serial.threads_for(8, torch.device("cpu")):
        raise RuntimeError("forward failed")
    assert torch.get_num_threads() == 2


@pytest.mark.usefixtures("two_threads")
def test_one_thread_gives_the_same_embedding(monkeypatch):
    from models.text import SentenceEncoder

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    encoder = SentenceEncoder.load()
    text = ["A short text that one request sends on its own."]
    alone = encoder.encode(text)
    monkeypatch.setattr(serial, "SERIAL_MAX_TOKENS", 0)
    every_thread = encoder.encode(text)
    assert torch.allclose(alone, every_thread, atol=1e-6)
