"""A user's own transformers forecasters, served from their ``save_pretrained`` folders:
exact backends against the class's own forward through HTTP (batched and alone), seeded
quantiles against the class's own ``generate``, optional timestamps, every payload form, every
backend run or refused, and unsupported folders stopping start-up with one line.

The models are tiny and random (``tests/utils/tiny_forecasters.py``), built with transformers'
own classes, so the reference is the real library.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from models.attention import BACKENDS
from service.engine.registry import ModelLoadError, load_servables
from service.settings import Settings
from tests.service.helpers import folders_client
from tests.utils.tiny_forecasters import (
    CHANNELS,
    build,
    generate_reference,
    history,
    patchtst_config,
    patchtst_reference,
    reference_model,
    seq2seq_config,
    seq2seq_series,
)

EXACT = 1e-4  # relative error bound of full / flash against the class's forward (fp32)
QUANTILES = [0.1, 0.5, 0.9]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf-forecasters")
    return {
        "point": build(
            patchtst_config(), root / "tiny-patchtst", sidecar={"channels": list(CHANNELS)}
        ),
        "normal": build(
            patchtst_config("normal"), root / "tiny-patchtst-normal", seed=1, sidecar={"freq": "h"}
        ),
        "tst": build(seq2seq_config("tst"), root / "tiny-tst", seed=2),
        "informer": build(seq2seq_config("informer", input_size=2), root / "tiny-informer", seed=3),
    }


@pytest.fixture(scope="module")
def client(folders: dict[str, Path]):
    with folders_client(folders.values()) as c:
        yield c


def _forecast(client: TestClient, model: str, series: list[dict[str, Any]], **extra: Any) -> Any:
    return client.post("/forecast", json={"model": model, "series": series, **extra})


def _ok(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return response.json()["forecasts"]


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


# ------------------------------------------------------------------ exactness


@pytest.mark.parametrize("backend", ["full", "flash"])
@pytest.mark.parametrize("kind", ["point", "normal"])
def test_patchtst_exact_backends_match_the_class_through_http(
    client: TestClient, folders: dict[str, Path], kind: str, backend: str
) -> None:
    folder = folders[kind]
    values = np.stack([history(96, 3, seed) for seed in range(3)])
    want = patchtst_reference(folder, values)
    series = [{"values": v.tolist()} for v in values]
    together = np.asarray(
        [f["values"] for f in _ok(_forecast(client, folder.name, series, attention=backend))]
    )
    assert together.shape == want.shape == (3, 12, 3)
    assert _relative(together, want) <= EXACT
    alone = np.asarray(
        [_ok(_forecast(client, folder.name, [s], attention=backend))[0]["values"] for s in series]
    )
    assert _relative(alone, want) <= EXACT


def test_an_approximate_backend_moves_the_forecast_past_the_exact_bound(
    client: TestClient, folders: dict[str, Path]
) -> None:
    """The bound above can fail: attention carries weight in these models."""
    values = history(96, 3, seed=7)
    want = patchtst_reference(folders["point"], values[None])
    got = _ok(
        _forecast(
            client,
            "tiny-patchtst",
            [{"values": values.tolist()}],
            attention="performer",
            attention_options={"num_features": 8},
        )
    )[0]["values"]
    assert _relative(np.asarray(got)[None], want) > 100 * EXACT


@pytest.mark.parametrize("backend", ["full", "flash"])
@pytest.mark.parametrize("kind", ["tst", "informer"])
def test_encoder_decoder_samples_match_the_class_generate(
    client: TestClient, folders: dict[str, Path], kind: str, backend: str
) -> None:
    folder = folders[kind]
    model = reference_model(folder)
    built = [seq2seq_series(folder, seed) for seed in range(3)]
    body = dict(attention=backend, quantiles=QUANTILES, seed=11)
    got = _ok(_forecast(client, folder.name, [s for s, _ in built], **body))
    for i, (_, inputs) in enumerate(built):
        samples = generate_reference(model, 11 + i, **inputs)
        assert _relative(np.asarray(got[i]["values"]), samples.mean(axis=0)) <= EXACT
        for q in QUANTILES:
            want = np.quantile(samples, q, axis=0)
            assert _relative(np.asarray(got[i]["quantiles"][f"{q:g}"]), want) <= EXACT
    # Batching does not change a series' draws: the second series alone, with its own seed.
    alone = _ok(_forecast(client, folder.name, [built[1][0]], **{**body, "seed": 12}))[0]
    assert alone == got[1]


def test_distribution_quantiles_are_the_class_samples_and_reproducible(
    client: TestClient, folders: dict[str, Path]
) -> None:
    folder = folders["normal"]
    model = reference_model(folder)
    values = [history(96, 3, seed) for seed in (1, 2)]
    body = dict(quantiles=QUANTILES, seed=5)
    got = _ok(_forecast(client, folder.name, [{"values": v.tolist()} for v in values], **body))
    for i, v in enumerate(values):
        samples = generate_reference(model, 5 + i, past_values=v)
        for q in QUANTILES:
            want = np.quantile(samples, q, axis=0)
            assert _relative(np.asarray(got[i]["quantiles"][f"{q:g}"]), want) <= EXACT
    again = _ok(_forecast(client, folder.name, [{"values": v.tolist()} for v in values], **body))
    assert again == got
    other = _ok(
        _forecast(
            client, folder.name, [{"values": values[0].tolist()}], quantiles=QUANTILES, seed=6
        )
    )
    assert other[0]["quantiles"] != got[0]["quantiles"]
    # The mean is analytic, not sampled: the seed leaves it (batch size may move the last bits).
    assert np.allclose(other[0]["values"], got[0]["values"], rtol=1e-5)
    low, mid, high = (np.asarray(got[0]["quantiles"][f"{q:g}"]) for q in QUANTILES)
    assert (low <= mid).all() and (mid <= high).all()


# ------------------------------------------------------------------ payloads and time


def test_every_payload_form_gives_the_same_forecast(client: TestClient) -> None:
    values = history(100, 3, seed=4).astype(np.float32).astype(np.float64)
    rows = _ok(_forecast(client, "tiny-patchtst", [{"values": values.tolist()}]))[0]
    columns = {name: values[:, i].tolist() for i, name in enumerate(CHANNELS)}
    by_columns = _ok(_forecast(client, "tiny-patchtst", [{"columns": columns}]))[0]
    packed = {
        name: base64.b64encode(values[:, i].astype("<f4").tobytes()).decode()
        for i, name in enumerate(CHANNELS)
    }
    by_base64 = _ok(_forecast(client, "tiny-patchtst", [{"columns": packed}]))[0]
    assert rows == by_columns == by_base64
    assert "timestamps" not in rows  # none given, none invented


def test_timestamps_are_optional_and_continued_at_their_step(client: TestClient) -> None:
    values = history(96, 3, seed=5).tolist()
    stamps = [f"2024-03-01 {h // 4:02d}:{(h % 4) * 15:02d}:00" for h in range(96)]
    out = _ok(_forecast(client, "tiny-patchtst", [{"values": values, "timestamps": stamps}]))[0]
    assert out["timestamps"][:2] == ["2024-03-02 00:00:00", "2024-03-02 00:15:00"]
    assert len(out["timestamps"]) == 12
    plain = _ok(_forecast(client, "tiny-patchtst", [{"values": values}]))[0]
    assert plain["values"] == out["values"]
    uneven = [*stamps[:-1], "2024-03-01 23:50:00"]
    response = _forecast(client, "tiny-patchtst", [{"values": values, "timestamps": uneven}])
    assert response.status_code == 422
    assert "series 0" in response.text and "timestamps" in response.text


def test_start_needs_the_folder_freq(client: TestClient) -> None:
    values = history(96, 3, seed=6).tolist()
    refused = _forecast(
        client, "tiny-patchtst", [{"values": values, "start": "2024-01-01 00:00:00"}]
    )
    assert refused.status_code == 422 and "attnserve.json" in refused.text
    out = _ok(
        _forecast(
            client, "tiny-patchtst-normal", [{"values": values, "start": "2024-01-01 00:00:00"}]
        )
    )[0]
    assert out["timestamps"][0] == "2024-01-05 00:00:00"  # 96 hourly rows, then the next hour


# ------------------------------------------------------------------ clear refusals


@pytest.mark.parametrize(
    ("model", "series", "extra", "says"),
    [
        ("tiny-patchtst", {"values": [[1.0, 2.0, 3.0]] * 95}, {}, "at least 96 rows"),
        ("tiny-patchtst", {"values": [[1.0, 2.0]] * 96}, {}, "every row needs 3 values"),
        (
            "tiny-patchtst",
            {"values": [[1.0, 2.0, 3.0]] * 96},
            {"quantiles": [0.5]},
            "point forecasts",
        ),
        (
            "tiny-patchtst",
            {"values": [[1.0, 2.0, 3.0]] * 96, "time_features": [[0.0]] * 108},
            {},
            "takes no time_features",
        ),
        (
            "tiny-tst",
            {"values": [[1.0]] * 27, "static_categorical": [0]},
            {},
            "needs time_features",
        ),
        (
            "tiny-tst",
            {"values": [[1.0]] * 27, "time_features": [[0.0, 0.0]] * 10, "static_categorical": [0]},
            {},
            "33 rows",
        ),
        (
            "tiny-tst",
            {"values": [[1.0]] * 27, "time_features": [[0.0, 0.0]] * 33, "static_categorical": [9]},
            {},
            "[0, 4)",
        ),
        ("tiny-patchtst", {"columns": {"load": [1.0] * 96}}, {}, "missing temp, wind"),
    ],
)
def test_bad_input_is_a_422_that_says_what_to_fix(
    client: TestClient, model: str, series: dict[str, Any], extra: dict[str, Any], says: str
) -> None:
    response = _forecast(client, model, [series], **extra)
    assert response.status_code == 422, response.text
    assert says in response.json()["error"]["message"]
    assert (
        _forecast(client, "tiny-patchtst", [{"values": history(96, 3, 0).tolist()}]).status_code
        == 200
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_runs_and_the_card_says_what_each_layer_ran(
    client: TestClient, backend: str
) -> None:
    card = next(c for c in client.get("/models").json()["data"] if c["name"] == "tiny-tst")
    assert card["source"] == "transformers" and card["head"]["kind"] == "distribution"
    assert card["context"] == 27 and card["horizon"] == 6 and card["time_features"] == 2
    layers = card["backends"][backend]["layers"]
    assert set(layers) == {"encoder.0.self", "encoder.1.self", "decoder.0.self", "decoder.0.cross"}
    if backend == "nystrom":  # no causal variant: the decoder's self-attention runs exact
        assert layers["decoder.0.self"] in ("flash", "full")
        assert "causal" in card["backends"][backend]["fallbacks"]["decoder.0.self"]
    body = {
        "values": [[1.0 + 0.1 * i] for i in range(27)],
        "time_features": [[0.0, 0.0]] * 33,
        "static_categorical": [1],
    }
    out = _ok(_forecast(client, "tiny-tst", [body], attention=backend))[0]
    assert np.isfinite(np.asarray(out["values"])).all()


def test_patchtst_card(client: TestClient) -> None:
    cards = {c["name"]: c for c in client.get("/models").json()["data"]}
    card = cards["tiny-patchtst"]
    assert card["class"] == "PatchTSTForPrediction"
    assert card["channels"] == list(CHANNELS) and card["context"] == 96 and card["horizon"] == 12
    assert card["head"]["kind"] == "point"
    assert set(card["backends"]) == set(BACKENDS)
    assert card["backends"]["nystrom"]["layers"] == {
        "encoder.0.self": "nystrom",
        "encoder.1.self": "nystrom",
    }
    normal = cards["tiny-patchtst-normal"]
    assert normal["head"]["kind"] == "distribution" and normal["head"]["samples"] == 32
    assert normal["channels"] == ["0", "1", "2"] and normal["freq"] == "h"


# ------------------------------------------------------------------ start-up


def _settings(*paths: Path) -> Settings:
    return Settings(models=tuple(str(p) for p in paths), device="cpu", background_load=False)


def test_model_dir_serves_a_transformers_folder_under_its_name(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    shutil.copytree(folders["point"], tmp_path / "my-forecaster")
    settings = Settings(
        models=(str(folders["tst"]),), model_dir=tmp_path, device="cpu", background_load=False
    )
    names = [s.name for s in load_servables(settings, "cpu")]
    assert names == ["tiny-tst", "my-forecaster"]


def test_unsupported_folders_stop_start_up_with_one_line(tmp_path: Path) -> None:
    from transformers import PatchTSTModel

    auto = build(seq2seq_config("autoformer"), tmp_path / "auto")
    with pytest.raises(ModelLoadError, match=r"auto: .*auto-correlation") as info:
        load_servables(_settings(auto), "cpu")
    assert "\n" not in str(info.value)

    base = tmp_path / "base"
    PatchTSTModel(patchtst_config()).save_pretrained(base)
    with pytest.raises(ModelLoadError, match=r"base: .*PatchTSTModel.*PatchTSTForPrediction"):
        load_servables(_settings(base), "cpu")

    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    shutil.copy(base / "config.json", no_weights / "config.json")
    config = json.loads((no_weights / "config.json").read_text())
    config["architectures"] = ["PatchTSTForPrediction"]
    (no_weights / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=r"no-weights: no weights"):
        load_servables(_settings(no_weights), "cpu")

    bad_sidecar = build(patchtst_config(), tmp_path / "bad-sidecar", sidecar={"channels": ["a"]})
    with pytest.raises(ModelLoadError, match=r"bad-sidecar: .*1 channels but the model has 3"):
        load_servables(_settings(bad_sidecar), "cpu")


def test_a_probsparse_informer_defaults_to_our_probsparse_at_its_factor(tmp_path: Path) -> None:
    """transformers' ProbSparse layer does not call the attention interface: the loader builds
    the model with the same projections as exact layers, so every backend runs through ours."""
    folder = build(
        seq2seq_config("informer", attention_type="prob", sampling_factor=3, input_size=2),
        tmp_path / "prob-informer",
    )
    (servable,) = load_servables(_settings(folder), "cpu")
    card = servable.card()
    assert card["default_attention"] == "probsparse"
    assert servable.default_call("probsparse").options_dict["factor"] == 3
    assert card["backends"]["probsparse"]["layers"]["encoder.0.self"] == "probsparse"
    exact = reference_model(build(seq2seq_config("informer", input_size=2), tmp_path / "same"))
    series, inputs = seq2seq_series(folder, seed=2)
    window = servable.windows([series], seed=4)
    got = servable.run(window, servable.default_call("flash"))[0]
    assert (
        _relative(np.asarray(got.values), generate_reference(exact, 4, **inputs).mean(axis=0))
        <= EXACT
    )


def test_a_body_parsed_in_the_helper_process_gives_the_same_answer(
    folders: dict[str, Path], client: TestClient
) -> None:
    """Covariates and quantiles survive the helper process's packed form unchanged."""
    from tests.service.helpers import make_app

    servables = load_servables(_settings(folders["tst"]), "cpu")
    app = make_app(servables, body_parse_processes=1, body_parse_min_bytes=256)
    series = [seq2seq_series(folders["tst"], seed)[0] for seed in range(2)]
    body = dict(quantiles=QUANTILES, seed=3, attention="flash")
    with TestClient(app) as offloaded:
        got = _ok(_forecast(offloaded, "tiny-tst", series, **body))
        bad = _forecast(offloaded, "tiny-tst", [{**series[0], "time_features": [[0.0]] * 33}])
    assert got == _ok(_forecast(client, "tiny-tst", series, **body))
    assert bad.status_code == 422 and "33 rows" in bad.json()["error"]["message"]
