"""Served model names (``served_model_names``, vLLM's and TEI's ``--served-model-name``): a
client written for ``text-embedding-3-small`` reaches a loaded model by configuration. Every
route that takes a model name takes the alias, ``/models`` and ``/v1/models`` list it as vLLM
does (an entry whose ``id`` is the served name, ``root`` the model), TEI's ``/info`` says it,
and an alias that clashes with a loaded model or names none stops start-up in one line.

Also TEI's routes with several models loaded: a body's ``model`` that no loaded model answers
to is ignored, as TEI (which serves one model) ignores it; the route's default model answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.cli import build_parser, settings_overrides
from service.engine.registry import ModelLoadError
from service.engine.served_names import served_names, with_served_names
from service.settings import Settings
from tests.service.helpers import assert_error, folders_app, folders_client
from tests.utils.live_server import DROP_IN_ENCODER, DROP_IN_RERANKER, serving
from tests.utils.tiny_encoders import save_tiny_encoder

ALIAS = "text-embedding-3-small"
SECOND = "second-embedder"
TEXTS = ["the first text", "a second, somewhat longer text"]


@dataclass
class Loaded:
    """What served_names reads of a loaded model."""

    name: str
    aliases: tuple[str, ...] = ()


LOADED: Any = [Loaded("enc", ("org/enc",)), Loaded("rr")]


# ----------------------------------------------------------------------------- the rule


def test_aliases_name_loaded_models_by_name_or_alias() -> None:
    assert served_names("", LOADED) == {}
    got = served_names(f" {ALIAS}=enc , ada=org/enc,cohere-rerank=rr ", LOADED)
    assert got == {ALIAS: "enc", "ada": "enc", "cohere-rerank": "rr"}
    assert served_names(ALIAS, [Loaded("only")]) == {ALIAS: "only"}  # a bare alias: the one


def test_served_names_join_the_models_aliases_once() -> None:
    models: Any = [Loaded("enc", ("org/enc",)), Loaded("rr")]
    for _ in range(2):  # the same servables served again (a test's, a restarted app's)
        with_served_names(models, f"{ALIAS}=enc,org/enc=enc")
        assert [m.aliases for m in models] == [("org/enc", ALIAS), ()]


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("rr=enc", ["'rr'", "already the name of loaded model 'rr'"]),
        ("org/enc=rr", ["'org/enc'", "'enc'"]),
        (f"{ALIAS}=missing", [ALIAS, "'missing'", "not loaded", "enc, rr"]),
        (ALIAS, [ALIAS, "2 are loaded", f"{ALIAS}=MODEL"]),
        ("=enc", ["'=enc'", "alias=model"]),
        (f"{ALIAS}=", ["alias=model"]),
        (f"{ALIAS}=enc,{ALIAS}=rr", [ALIAS, "twice"]),
    ],
)
def test_a_clash_or_an_unknown_model_is_refused_naming_it(text: str, needles: list[str]) -> None:
    with pytest.raises(ModelLoadError) as refused:
        served_names(text, LOADED)
    message = str(refused.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_the_setting_comes_from_env_and_from_repeated_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().served_model_names == ""
    monkeypatch.setenv("ATTNSERVE_SERVED_MODEL_NAMES", f"{ALIAS}=enc")
    assert Settings().served_model_names == f"{ALIAS}=enc"
    args = build_parser().parse_args(
        ["serve", "--served-model-name", f"{ALIAS}=enc", "--served-model-name", "a=b,c=d"]
    )
    overrides = settings_overrides(args)
    assert Settings(**overrides).served_model_names == f"{ALIAS}=enc,a=b,c=d"
    args = build_parser().parse_args(["serve", "--served-model-names", "x=y", "--no-auto-truncate"])
    settings = Settings(**settings_overrides(args))
    assert (settings.served_model_names, settings.auto_truncate) == ("x=y", False)
    args = build_parser().parse_args(["serve", "--auto-truncate"])
    assert Settings(**settings_overrides(args)).auto_truncate is True


# ----------------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def folders(drop_in_paths: list[Path], tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The drop-in encoder, reranker and classifier, then a second encoder."""
    second = save_tiny_encoder(tmp_path_factory.mktemp("served") / SECOND, "bert", seed=7)
    return [*drop_in_paths, second]


@pytest.fixture(scope="module")
def client(folders: list[Path]) -> Iterator[TestClient]:
    names = f"{ALIAS}={SECOND},rerank-english-v3.0={DROP_IN_RERANKER}"
    with folders_client(folders, served_model_names=names) as c:
        yield c


def test_every_route_that_takes_a_name_takes_the_alias(client: TestClient) -> None:
    by_name = client.post("/v1/embeddings", json={"input": TEXTS, "model": SECOND})
    by_alias = client.post("/v1/embeddings", json={"input": TEXTS, "model": ALIAS})
    assert by_alias.status_code == 200, by_alias.text
    assert by_alias.headers["x-model"] == SECOND
    assert by_alias.json()["data"] == by_name.json()["data"]
    encoded = client.post("/encode", json={"inputs": TEXTS, "model": ALIAS})
    assert encoded.headers["x-model"] == SECOND
    embedded = client.post("/embed", json={"inputs": TEXTS}, headers={"x-model": ALIAS})
    assert embedded.headers["x-model"] == SECOND
    np.testing.assert_allclose(embedded.json(), encoded.json()["embeddings"], atol=1e-6)
    body = {"query": "q", "documents": ["a", "b c"], "model": "rerank-english-v3.0"}
    reranked = client.post("/v1/rerank", json=body)
    assert reranked.status_code == 200 and reranked.headers["x-model"] == DROP_IN_RERANKER


def test_models_lists_each_served_name_as_vllm_does(client: TestClient) -> None:
    for path in ("/models", "/v1/models"):
        data = client.get(path).json()["data"]
        ids = [card["id"] for card in data]
        assert ids[-2:] == [SECOND, ALIAS], ids  # the alias after its model's card
        entry = data[-1]
        assert entry["root"] == SECOND and entry["name"] == SECOND
        assert ids.index("rerank-english-v3.0") == ids.index(DROP_IN_RERANKER) + 1
    card = client.get(f"/models/{ALIAS}")
    assert card.status_code == 200 and card.json()["name"] == SECOND
    assert ALIAS in card.json()["aliases"]


def test_teis_info_says_the_served_name(client: TestClient) -> None:
    assert client.get("/info", params={"model": SECOND}).json()["served_model_name"] == ALIAS
    first = client.get("/info").json()
    assert (first["model_id"], first["served_model_name"]) == (DROP_IN_ENCODER, DROP_IN_ENCODER)


def test_teis_routes_ignore_a_body_model_no_model_answers_to(client: TestClient) -> None:
    default = client.post("/embed", json={"inputs": TEXTS})
    for path, body in (("/embed", {"inputs": TEXTS}), ("/", {"inputs": TEXTS})):
        r = client.post(path, json={**body, "model": "some-other-model"})
        assert r.status_code == 200, r.text
        assert r.headers["x-model"] == DROP_IN_ENCODER and r.json() == default.json()
    named = client.post("/embed", json={"inputs": TEXTS, "model": ALIAS})
    assert named.headers["x-model"] == SECOND and named.json() != default.json()
    r = client.post("/rerank", json={"query": "q", "texts": ["a"], "model": "nope"})
    assert r.status_code == 200 and r.headers["x-model"] == DROP_IN_RERANKER
    # The x-model header is this server's own, said on purpose: an unknown one is a 404, as is
    # an unknown name on the other peers' routes.
    header = client.post("/embed", json={"inputs": TEXTS}, headers={"x-model": "nope"})
    assert_error(header, 404, "model_not_found", "nope")
    openai = client.post("/v1/embeddings", json={"input": TEXTS, "model": "nope"})
    assert_error(openai, 404, "model_not_found", "nope")


@pytest.mark.parametrize(
    ("names", "needles"),
    [
        (f"{DROP_IN_RERANKER}={DROP_IN_ENCODER}", [repr(DROP_IN_RERANKER), "already the name"]),
        (f"{ALIAS}=not-loaded", [ALIAS, "'not-loaded'", "not loaded"]),
    ],
)
def test_a_bad_alias_stops_start_up_in_one_line(
    drop_in_paths: list[Path], names: str, needles: list[str]
) -> None:
    app = folders_app(drop_in_paths[:2], served_model_names=names)
    with pytest.raises(ModelLoadError) as refused, TestClient(app):
        pass
    message = str(refused.value)
    assert "\n" not in message and all(n in message for n in needles), message
    assert message in app.state.attnserve.lifecycle.detail


# ----------------------------------------------------------------------------- openai SDK


def test_openai_sdk_reaches_the_aliased_model(drop_in_paths: list[Path]) -> None:
    """The openai package, unedited, with model="text-embedding-3-small": the loaded encoder
    answers, as sentence-transformers embeds the same texts."""
    import openai
    from sentence_transformers import SentenceTransformer

    folder = drop_in_paths[0]
    app = folders_app([folder], served_model_names=ALIAS)  # a bare alias: the one model
    with serving(app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none")
        got = client.embeddings.create(model=ALIAS, input=TEXTS)
        assert ALIAS in [m.id for m in client.models.list()]
    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    expected = model.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose([d.embedding for d in got.data], expected, atol=1e-5)
