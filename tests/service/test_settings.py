"""Settings from env vars and flags; the CLI's settings table."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from models.attention import BACKENDS
from models.names import BACKEND_NAMES
from service.cli import build_parser, main, settings_table
from service.settings import DEFAULT_MODELS, Settings


def test_defaults_load_every_shipped_model() -> None:
    s = Settings()
    assert s.models == DEFAULT_MODELS
    assert s.max_text_tokens == 256 and s.api_key is None


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
