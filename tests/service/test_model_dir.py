"""``model_dir``: every checkpoint folder in it is served beside ``models``; a broken folder stops
start-up with one line naming it (through ``load_servables``, the app's lifespan and the real
``attnserve serve``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from safetensors.torch import load_file, save_file

from models.informer import InformerForecaster
from models.training.data.ett import ETTH1_CHANNELS
from service.app import create_app
from service.engine.registry import ModelLoadError, load_servables, model_dir_checkpoints
from service.engine.servables.forecast import ForecastServable
from service.http.routes.models import INFINITY_CARD_FIELDS
from service.settings import Settings
from tests.service.helpers import hourly_series
from tests.service.server_process import start_up_failure
from tests.utils.informer import tiny_checkpoint

SHIPPED = "informer-etth1-h24"
MINE = ("load-h8", "solar-h8")  # two tiny checkpoints, different weights


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model_dir with two tiny checkpoints, plus a hidden folder and a plain file to skip."""
    root = tmp_path_factory.mktemp("my-models")
    for seed, name in enumerate(MINE):
        tiny_checkpoint(root / name, seed=seed)
    (root / ".cache").mkdir()  # hidden: skipped, though it is no checkpoint
    (root / "README.md").write_text("my models\n")  # a plain file: skipped
    return root


def settings(model_dir: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "models": (SHIPPED,),
        "model_dir": model_dir,
        "device": "cpu",
        "background_load": False,
        "max_wait_ms": 0.0,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


# ------------------------------------------------------------------ serving the folders


def test_the_folders_are_listed_by_name_skipping_hidden_entries_and_files(good_dir: Path) -> None:
    assert model_dir_checkpoints(good_dir) == {name: good_dir / name for name in MINE}


def test_every_folder_is_served_beside_the_shipped_model(good_dir: Path) -> None:
    with TestClient(create_app(settings(good_dir))) as c:
        cards = {card["name"]: card for card in c.get("/models").json()["data"]}
        assert list(cards) == [SHIPPED, *MINE]
        outputs = []
        for name in MINE:
            expected = ForecastServable(InformerForecaster.load(str(good_dir / name))).card()
            card = cards[name]
            # What the server adds to the model's card (infinity's model fields among them).
            served = ("limits", "auto", "routes", *INFINITY_CARD_FIELDS)
            assert {k: v for k, v in card.items() if k not in served} == expected
            assert card["task"] == "forecast" and card["context"] == 24 and card["horizon"] == 8
            # What the folder holds, known without the card code: its name, the tiny
            # checkpoint's ETTh1 channels, hourly steps and ProbSparse default.
            assert card["name"] == name and card["channels"] == list(ETTH1_CHANNELS)
            assert card["freq"] == "h" and card["default_attention"] == "probsparse"
            assert c.get(f"/models/{name}").json() == card

            r = c.post("/forecast", json={"model": name, "series": [hourly_series(30)]})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["model"] == name
            assert len(body["forecasts"][0]["values"]) == 8
            outputs.append(body["forecasts"][0]["values"])
        assert outputs[0] != outputs[1]  # two models, not one served twice
        r = c.post("/forecast", json={"model": SHIPPED, "series": [hourly_series(100)]})
        assert r.status_code == 200, r.text


def test_an_empty_model_dir_serves_the_models_alone(tmp_path: Path) -> None:
    assert [s.name for s in load_servables(settings(tmp_path), "cpu")] == [SHIPPED]


# ------------------------------------------------------------------ broken folders


def edit_config(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        meta = json.loads((folder / "config.json").read_text())
        change(meta)
        (folder / "config.json").write_text(json.dumps(meta))

    return apply


def drop_weight(folder: Path) -> None:
    state = load_file(str(folder / "model.safetensors"))
    del state[sorted(state)[0]]
    save_file(state, str(folder / "model.safetensors"))


BROKEN: dict[str, tuple[Callable[[Path], object], str]] = {
    "no-config": (lambda f: (f / "config.json").unlink(), "config.json is missing"),
    "no-weights": (lambda f: (f / "model.safetensors").unlink(), "model.safetensors is missing"),
    "not-json": (
        lambda f: (f / "config.json").write_text('{"model": {'),
        "config.json is not valid JSON",
    ),
    "no-scaler": (edit_config(lambda m: m.pop("scaler")), "config.json lacks scaler"),
    "wrong-type": (
        edit_config(lambda m: m.update(horizon="8")),
        "in config.json, horizon is str, not int",
    ),
    "bad-config": (
        edit_config(lambda m: m["model"].update(n_heads=3)),
        "is not a valid Informer config (d_model 16 must be divisible by n_heads 3)",
    ),
    "wider": (
        edit_config(lambda m: m["model"].update(d_model=32)),
        "model.safetensors does not match config.json (",  # ... is [16, ...] but ... needs [32
    ),
    "key-missing": (drop_weight, "model.safetensors does not match config.json (missing "),
    "unreadable": (
        lambda f: (f / "model.safetensors").write_bytes(b"not safetensors"),
        "model.safetensors cannot be read",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_folder_stops_loading_naming_the_folder(tmp_path: Path, case: str) -> None:
    breaks, problem = BROKEN[case]
    tiny_checkpoint(tmp_path / "fine")
    breaks(tiny_checkpoint(tmp_path / case))
    with pytest.raises(ModelLoadError) as caught:
        load_servables(settings(tmp_path), "cpu")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / case}: "), message
    assert problem in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("models", "folder", "owner"),
    [
        ((SHIPPED,), SHIPPED, repr(SHIPPED)),
        (("all-MiniLM-L6-v2",), "all-MiniLM-L6-v2", "'all-MiniLM-L6-v2'"),
    ],
)
def test_a_folder_named_like_another_model_is_refused_before_loading(
    tmp_path: Path, models: tuple[str, ...], folder: str, owner: str
) -> None:
    (tmp_path / folder).mkdir()  # refused by name: its (missing) files are never read
    with pytest.raises(ModelLoadError) as caught:
        load_servables(settings(tmp_path, models=models), "cpu")
    assert str(caught.value) == (
        f"{tmp_path / folder}: model name {folder!r} is already taken by {owner} in models; "
        "a folder in model_dir is served under its folder's name: rename the folder, or drop "
        "the other model from models"
    )


def test_two_checkpoint_paths_with_one_folder_name_are_refused(tmp_path: Path) -> None:
    a, b = tiny_checkpoint(tmp_path / "a" / "m"), tiny_checkpoint(tmp_path / "b" / "m")
    s = Settings(models=(str(a), str(b)), device="cpu")
    with pytest.raises(ModelLoadError, match="would both serve as 'm'"):
        load_servables(s, "cpu")


def test_model_dir_must_be_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match="does not exist; give the folder that holds"):
        Settings(model_dir=tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValidationError, match=r"'.*file' is not a folder"):
        Settings(model_dir=tmp_path / "file")
    monkeypatch.setenv("ATTNSERVE_MODEL_DIR", "")
    assert Settings().model_dir is None  # set but empty: no folder (not the working directory)
    monkeypatch.setenv("ATTNSERVE_MODEL_DIR", str(tmp_path))
    assert Settings().model_dir == tmp_path


def test_the_cli_refuses_a_model_dir_that_is_not_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from service.cli import main

    assert main(["serve", "--model-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert (
        "invalid settings" in err and f"model_dir {str(tmp_path / 'nope')!r} does not exist" in err
    )


def test_a_checkpoint_folder_given_as_model_dir_is_refused_with_the_fix(tmp_path: Path) -> None:
    ckpt = tiny_checkpoint(tmp_path / "solar-h8")
    with pytest.raises(ModelLoadError, match=r"is itself a model folder .* the folder above"):
        load_servables(settings(ckpt), "cpu")


# ------------------------------------------------------------------ what the user sees


@pytest.fixture(scope="module")
def broken_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broken-models")
    tiny_checkpoint(root / "fine")
    (tiny_checkpoint(root / "half") / "model.safetensors").unlink()
    return root


def test_a_foreground_load_raises_out_of_the_lifespan(broken_dir: Path) -> None:
    app = create_app(settings(broken_dir))
    with (
        pytest.raises(ModelLoadError, match=r"half: model\.safetensors is missing"),
        TestClient(app),
    ):
        pass
    assert app.state.attnserve.lifecycle.phase == "failed"


def test_a_background_load_fails_health_and_serves_nothing(broken_dir: Path) -> None:
    with TestClient(create_app(settings(broken_dir, background_load=True))) as c:
        deadline = time.monotonic() + 30
        while c.get("/healthz").status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        message = c.get("/healthz").json()["error"]["message"]
        assert message == (
            f"start-up failed: {broken_dir / 'half'}: model.safetensors is missing; a checkpoint "
            "folder holds config.json and model.safetensors, as "
            "`attnserve train --out DIR` writes them"
        )
        assert c.get("/readyz").status_code == 503
        assert c.get("/models").status_code == 503  # not the models that did load
        r = c.post("/forecast", json={"model": "fine", "series": [hourly_series(30)]})
        assert r.status_code == 503


@pytest.mark.e2e
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("background", "workers"), [("true", "1"), ("false", "1"), ("true", "2")])
def test_attnserve_serve_exits_1_with_one_line_naming_the_folder(
    broken_dir: Path, background: str, workers: str
) -> None:
    output = start_up_failure(
        "--models", SHIPPED,
        "--model-dir", str(broken_dir),
        "--background-load", background,  # workers always load before they listen
        "--workers", workers,
    )  # fmt: skip
    assert f"start-up failed: {broken_dir / 'half'}: model.safetensors is missing" in output
    if workers != "1":
        assert "exited with status 1; stopping" in output


# ------------------------------------------------------------------ precision copies (issue 43)


def _only(folder: Path, precisions: tuple[str, ...]) -> Settings:
    return Settings(
        models=(str(folder),), device="cpu", background_load=False, precisions=precisions
    )


def test_a_folder_that_runs_in_none_of_the_precisions_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    # A transformers PatchTST runs in float32 and bfloat16 only: int8 alone leaves it nothing.
    from tests.utils.tiny_forecasters import build, patchtst_config

    folder = build(patchtst_config(), tmp_path / "my-patchtst")
    with pytest.raises(ModelLoadError) as caught:
        load_servables(_only(folder, ("int8",)), "cpu")
    message = str(caught.value)
    assert message.startswith(f"{folder}: "), message
    assert "int8" in message and "add float32 to precisions" in message
    assert "\n" not in message


@pytest.mark.parametrize("kind", ["classifier", "encoder"])
def test_a_precision_copy_that_fails_is_refused_naming_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # Whatever breaks while a folder's int8 copy is made (calibration, conversion) ends in the
    # one-line refusal, not a traceback out of the servable's constructor.
    from models.text import SentenceEncoder
    from models.text.classifier import TextClassifier
    from tests.utils.tiny_classifiers import save_tiny_classifier
    from tests.utils.tiny_encoders import save_tiny_encoder

    def fail(self: object, precision: str) -> object:
        if precision == "float32":
            return self
        raise RuntimeError(f"calibration of {precision} hit a NaN\nsecond line of detail")

    if kind == "classifier":
        folder = save_tiny_classifier(tmp_path / "my-classifier", "bert", 3, layers=1)
        monkeypatch.setattr(TextClassifier, "with_precision", fail)
    else:
        folder = save_tiny_encoder(tmp_path / "my-encoder", "bert", layers=1)
        monkeypatch.setattr(SentenceEncoder, "with_precision", fail)
    with pytest.raises(ModelLoadError) as caught:
        load_servables(_only(folder, ("float32", "int8")), "cpu")
    message = str(caught.value)
    assert message == (
        f"{folder}: cannot be served in float32, int8 (RuntimeError: calibration of int8 hit a NaN)"
    ), message
