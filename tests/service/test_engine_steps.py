"""The engine's steps that used to go round about: the windows token cap is counted before
``prepare`` (and refused with the same answer), ``auto`` applies its pick to the request's own
call without checking it again, and shortened / quantized / base64 embeddings are made on the
tensor with the same values the float lists gave."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from models.text.tokens import windows
from service.engine.auto_attention import Choice, candidates
from service.engine.batching.admission import window_token_cap, windows_refusal
from service.engine.batching.policy import BatchKey, length_bucket
from service.engine.servables.base import TextInput
from service.http.routes.embeddings import to_base64
from tests.service.helpers import TINY_TEXT, Wrapped, make_app, text_servable

BUDGET_S = 1.0
LIMIT = 64  # the tiny encoder's max_tokens
WORDS = "the model reads long documents of text in overlapping windows "


@pytest.fixture(scope="module")
def tiny_text() -> Any:
    return text_servable()


class Preparing(Wrapped):
    """Counts the jobs prepared."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.prepared = 0

    def prepare(self, checked: Any) -> Any:
        self.prepared += 1
        return self.inner.prepare(checked)


def test_windows_over_the_token_cap_are_refused_by_the_count_before_prepare(
    tiny_text: Any,
) -> None:
    double = Preparing(tiny_text)
    with TestClient(make_app([double], max_request_compute_s=BUDGET_S)) as client:
        worker = client.app.state.attnserve.batcher.workers[TINY_TEXT]  # type: ignore[attr-defined]
        long = [WORDS * 200]  # about 2,000 tokens
        checked = tiny_text.check(TextInput(long, long_text="windows"))
        key = BatchKey(checked.call, length_bucket(LIMIT))
        # One window of the limit costs a tenth of the budget: the cap is about 10 windows.
        rate = tiny_text.work_estimate(key.call, 1, LIMIT) / (BUDGET_S / 10)
        worker.cost.rates.update({(b, None, "float32"): rate for b in tiny_text.backends()})
        cap = window_token_cap(key, LIMIT, BUDGET_S, worker.seconds_estimate)
        assert cap is not None and LIMIT <= cap < 2_000
        counted = tiny_text.head.encoder.count_up_to(long, None, cap)
        assert counted.exceeded  # the premise
        body = {"model": TINY_TEXT, "inputs": long, "long_text": "windows"}
        refused = client.post("/encode", json=body)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "compute_budget_exceeded"
        expected = windows_refusal(
            tiny_text, key, counted.tokens, LIMIT, BUDGET_S, worker.seconds_estimate
        )
        assert error["message"] == str(expected)
        assert double.prepared == 0  # refused from the count alone
        # Within the cap: prepared once and embedded in windows, as without a limit.
        body["inputs"] = [WORDS * 20]
        fine = client.post("/encode", json=body)
        assert fine.status_code == 200, fine.text
        assert double.prepared == 1


@pytest.mark.parametrize(
    "request_",
    [
        TextInput(["a text"], attention="auto"),
        TextInput(["a text"], attention="auto", long_text="windows", normalize=False),
        TextInput(["a text"], attention="auto", token_embeddings=True, long_text="truncate"),
    ],
)
def test_auto_applies_its_pick_to_the_checked_call_as_a_second_check_would(
    tiny_text: Any, request_: TextInput
) -> None:
    checked = tiny_text.check(replace(request_, attention=None))
    found = candidates(tiny_text, _Unpriced(), 1, 16)
    assert len({c.backend for c in found}) > 1  # the premise: more than one to apply
    for candidate in found:
        choice = Choice(candidate, 0.1, None)
        again = tiny_text.check(
            replace(
                request_,
                attention=choice.backend,
                attention_options=choice.options,
                precision=choice.precision,
            )
        )
        assert choice.applied_to(checked.call) == again.call


class _Unpriced:
    """A worker that has measured nothing and has no memory budget (for :func:`candidates`)."""

    class limits:  # the attribute the worker has
        max_batch_memory = None

    def memory_estimate(self, key: Any, rows: int, length: int) -> int:
        return 0

    def seconds_estimate(self, key: Any, rows: int, length: int) -> None:
        return None


@pytest.mark.parametrize("long_text", ["error", "windows"])
def test_shortened_and_quantized_embeddings_on_the_tensor_equal_the_float_lists(
    tiny_text: Any, long_text: str
) -> None:
    texts = ["a short text", WORDS * 9, "another one, with punctuation!"]
    if long_text == "error":
        texts[1] = WORDS
    forms = ("int8", "uint8", "binary", "ubinary", "base64")
    for dimensions in (None, 8, tiny_text.head.dim):
        request = TextInput(texts, long_text=long_text, dimensions=dimensions, quantize=forms)
        checked = tiny_text.check(request)
        work = tiny_text.prepare(checked)
        rows = tiny_text.run(work.rows, checked.call)
        answer = work.finish(rows)
        # Before: each row a list of floats, made a tensor again for shortening and quantizing.
        as_lists = torch.tensor([r.tolist() for r in rows], dtype=torch.float32)
        if long_text == "windows":
            split = tiny_text.head.encoder.split_windows(texts)
            as_lists = windows.merge(as_lists, split, tiny_text.head.encoder.normalize)
        before = tiny_text.head._outputs(replace(request, quantize=forms[:-1]))(as_lists)
        before["base64"] = [to_base64(v) for v in before["float"]]
        assert answer == before
        plain = tiny_text.prepare(tiny_text.check(replace(request, quantize=())))
        assert plain.finish(rows) == before["float"]
