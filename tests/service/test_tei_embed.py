"""text-embeddings-inference's ``POST /embed``: a bare list of vectors, TEI's fields, and the
same embeddings as ``POST /encode``."""

from __future__ import annotations

import math

from fastapi.testclient import TestClient

from tests.service.helpers import TINY_TEXT, assert_error

LONG = " ".join(f"word{i}" for i in range(200))  # over the tiny encoder's 64 tokens


def _encode(client: TestClient, **body: object) -> list[list[float]]:
    r = client.post("/encode", json={"model": TINY_TEXT, **body})
    assert r.status_code == 200, r.text
    vectors: list[list[float]] = r.json()["embeddings"]
    return vectors


def test_embed_answers_a_bare_list_like_encode(client: TestClient) -> None:
    r = client.post("/embed", json={"inputs": ["first text", "a second one"]})
    assert r.status_code == 200, r.text
    vectors = r.json()
    assert isinstance(vectors, list) and len(vectors) == 2
    assert vectors == _encode(client, inputs=["first text", "a second one"], normalize=True)
    # TEI normalises by default; which model, backend and precision ran are in the headers.
    assert all(math.isclose(math.hypot(*v), 1.0, rel_tol=1e-5) for v in vectors)
    assert r.headers["x-model"] == TINY_TEXT
    assert r.headers["x-precision"] == "float32"
    assert r.headers["x-attention"] == "flash"
    one = client.post("/embed", json={"inputs": "first text", "normalize": False}).json()
    assert one == _encode(client, inputs=["first text"], normalize=False)


def test_truncation_direction_picks_the_end_that_is_cut(client: TestClient) -> None:
    refused = client.post("/embed", json={"inputs": [LONG], "truncate": False})  # auto_truncate:
    assert_error(refused, 422, "invalid_request", "truncate")  # test_auto_truncate.py
    right = client.post("/embed", json={"inputs": [LONG], "truncate": True}).json()
    left = client.post(
        "/embed", json={"inputs": [LONG], "truncate": True, "truncation_direction": "Left"}
    ).json()
    assert right == _encode(client, inputs=[LONG], truncate=True, normalize=True)
    assert left == _encode(
        client, inputs=[LONG], truncate=True, normalize=True, truncation_direction="left"
    )
    assert left != right  # another 62 of the 400-odd tokens were kept
    # The kept tail alone (its last words, cut on a token boundary) embeds the same as Left.
    tail = " ".join(LONG.split()[-40:])
    tail_left = client.post(
        "/embed", json={"inputs": [tail], "truncate": True, "truncation_direction": "left"}
    ).json()
    assert tail_left == left


def test_bad_fields_are_422s_that_say_what_is_allowed(client: TestClient) -> None:
    r = client.post("/embed", json={"inputs": ["x"], "truncation_direction": "middle"})
    assert_error(r, 422, "invalid_request", "truncation_direction")
    assert "right" in r.text and "left" in r.text
    assert_error(client.post("/embed", json={"input": ["x"]}), 422, "invalid_request", "inputs")
