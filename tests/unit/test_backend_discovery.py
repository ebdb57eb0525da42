"""A backend is one file: ``models/names.py`` finds the backend files by reading them (no torch),
the registry loads exactly those, and a new file is picked up with nothing else edited."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from models.attention import BACKENDS, get_backend
from models.names import ATTENTION_DIR, BACKEND_NAMES, discover_backends

ROOT = Path(__file__).resolve().parents[2]


def _backend_file(folder: Path, name: str, order: object, stem: str | None = None) -> None:
    """A backend file as the registry expects one, reduced to what discovery reads."""
    (folder / f"{stem or name}.py").write_text(
        textwrap.dedent(
            f'''\
            """A backend."""
            from models.attention.base import Backend
            ORDER = 1
            BACKEND = Backend(name="{name}", order={order}, exact=True, summary="s", citation="c")
            '''
        )
    )


def test_the_names_are_the_registry_in_listing_order() -> None:
    assert BACKEND_NAMES == BACKENDS
    # Tables and quality files are written in this order; new backends come after.
    assert BACKEND_NAMES[:5] == ("full", "flash", "probsparse", "performer", "nystrom")
    orders = [get_backend(name).order for name in BACKENDS]
    assert orders == sorted(orders)


def test_the_names_are_read_without_importing_torch() -> None:
    code = (
        "import sys, models.names as n; assert n.BACKEND_NAMES; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_a_new_backend_file_is_picked_up(tmp_path: Path) -> None:
    for path in ATTENTION_DIR.glob("*.py"):
        (tmp_path / path.name).write_text(path.read_text())
    _backend_file(tmp_path, "newcomer", 1000)
    assert discover_backends(tmp_path) == (*BACKEND_NAMES, "newcomer")


def test_order_decides_the_listing_and_other_files_are_ignored(tmp_path: Path) -> None:
    _backend_file(tmp_path, "second", 2)
    _backend_file(tmp_path, "first", 1)
    (tmp_path / "helpers.py").write_text("BACKENDS = ('not', 'a', 'backend')\n")
    (tmp_path / "annotated.py").write_text(
        'BACKEND: Backend = Backend(name="annotated", order=0, exact=False)\n'
    )
    assert discover_backends(tmp_path) == ("annotated", "first", "second")


@pytest.mark.parametrize(
    ("stem", "order", "words"),
    [
        ("misnamed", "1", "must be the file's name"),
        (None, "ORDER", "literal order="),
        (None, "'1'", "order= an integer"),
    ],
)
def test_a_malformed_declaration_is_refused(
    tmp_path: Path, stem: str | None, order: str, words: str
) -> None:
    _backend_file(tmp_path, "declared", order, stem=stem)
    with pytest.raises(ValueError, match=words):
        discover_backends(tmp_path)


def test_two_backends_with_one_order_are_refused(tmp_path: Path) -> None:
    _backend_file(tmp_path, "one", 7)
    _backend_file(tmp_path, "other", 7)
    with pytest.raises(ValueError, match="share an order"):
        discover_backends(tmp_path)


@pytest.mark.parametrize("name", BACKENDS)
def test_every_approximation_names_its_budget_and_exact_backends_none(name: str) -> None:
    """Quality-against-time sweeps vary each approximation's ``budget`` option: it must be one
    of its integer options, with a default the sweep can start from."""
    backend = get_backend(name)
    if backend.exact:
        assert backend.budget is None
        return
    assert backend.budget in backend.options, f"{name}: budget {backend.budget!r} is no option"
    spec = backend.options[backend.budget]
    assert spec.describe()["type"] == "integer"
