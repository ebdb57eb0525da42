"""A new attention backend is its file and its own test: every listing reads the registry.

Each test registers a stand-in backend (:func:`models.attention.registry.registered`: full's
kernel under a new name, marked approximate) and checks that it appears wherever a new backend
file's backend must: the kernel table of ``benchmarks/attention/backends.py`` (its command line,
its ratio lines and its in-process runner, without running the benchmark), the GPU check's
kernel grid and the quality commands' default backend lists. A last test reads the code
and refuses a hand-written list of backend names where a registry read belongs.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from benchmarks.attention import backends as kernel_table
from benchmarks.gpu_check import kernels as gpu_kernels
from models.attention import BACKENDS, AttentionError, Backend, attend, get_backend
from models.attention.registry import names, registered
from models.quality_file import backends_of
from models.text import SentenceEncoder
from models.text.classifier import TextClassifier
from models.text.multi_vector import MultiVectorModel
from models.text.quality import classifier as classifier_quality
from models.text.quality import embedding as embedding_quality
from models.text.quality import multi_vector as multi_vector_quality
from models.text.quality import sparse as sparse_quality
from models.text.quality.classifier import plan_for
from models.text.sparse import SparseEncoder
from tests.utils.tiny_classifiers import save_tiny_classifier
from tests.utils.tiny_encoders import save_tiny_encoder
from tests.utils.tiny_multi_vector import save_tiny_multi_vector
from tests.utils.tiny_sparse import save_tiny_splade

ROOT = Path(__file__).resolve().parents[2]
NEW = "newcomer"


def _newcomer() -> Backend:
    """full's record under a new name and the next order, approximate so that tables list it
    among the approximations too."""
    last = max(get_backend(name).order for name in BACKENDS)
    return dataclasses.replace(
        get_backend("full"), name=NEW, order=last + 1, exact=False, summary="a stand-in"
    )


@pytest.fixture
def newcomer() -> Iterator[str]:
    with registered(_newcomer()):
        yield NEW


def test_a_registered_backend_is_looked_up_until_the_block_ends() -> None:
    assert names() == BACKENDS
    with registered(_newcomer()):
        assert names() == (*BACKENDS, NEW)
        q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
        torch.testing.assert_close(attend(q, k, v, backend=NEW), attend(q, k, v, backend="full"))
        with pytest.raises(ValueError, match="taken"), registered(_newcomer()):
            pass
    assert names() == BACKENDS
    with pytest.raises(AttentionError, match="unknown attention backend"):
        get_backend(NEW)


def test_the_kernel_table_lists_every_registered_backend(newcomer: str) -> None:
    smoke = kernel_table.parse_args(["--smoke"]).implementations
    assert smoke == list(names()) and newcomer in smoke
    every = kernel_table.parse_args([]).implementations
    assert every[: len(names())] == list(names())
    assert every[len(names()) :] == list(kernel_table.PEERS.values())
    assert newcomer in kernel_table.approximate()
    rows = [
        {"impl": impl, "L": 128, "median_ms": ms, "peak_mib": 10.0, "rel_error": 0.0}
        for impl, ms in (("full", 4.0), ("flash", 2.0), (newcomer, 1.0))
    ]
    text = kernel_table._table(rows, kernel_table.parse_args(["--smoke"]))
    assert f"| {newcomer} | 128 |" in text
    assert f"- L=128: {newcomer} is 2.0x faster than flash" in text
    # The worker's runner computes the newcomer's attention at its default options.
    q, k, v = torch.randn(3, 1, 2, 6, 4).unbind(0)
    run = kernel_table._runner(newcomer, 2, 4, "cpu")
    torch.testing.assert_close(run(q, k, v), attend(q, k, v, backend="full"))


def test_the_gpu_check_grid_has_every_registered_backend(newcomer: str) -> None:
    backends = list(dict.fromkeys(cell[0] for cell in gpu_kernels.grid()))
    assert backends[:2] == ["flash", "full"] and set(backends) == set(names())


def test_the_quality_commands_measure_every_registered_backend(
    newcomer: str, tmp_path: Path
) -> None:
    """Each text quality command's default backend list is the registry's: the stand-in (full's
    kernel) is measured and loses nothing against the exact reference."""
    sparse = SparseEncoder.from_folder(save_tiny_splade(tmp_path / "splade", "bert"))
    plan = plan_for(sparse.max_tokens, 20)
    rows = backends_of(sparse_quality.measure(sparse, plan))
    assert newcomer in rows and rows[newcomer]["loss"] == 0.0

    multi = MultiVectorModel.from_folder(save_tiny_multi_vector(tmp_path / "mv", "colbert"))
    plan = plan_for(multi.side_tokenizers["document"].max_tokens, 20)
    rows = backends_of(multi_vector_quality.measure(multi, plan))
    assert newcomer in rows and rows[newcomer]["loss"] == 0.0

    folder = save_tiny_classifier(tmp_path / "ce", "bert", num_labels=1, cross_encoder=True)
    result = classifier_quality.measure(TextClassifier.from_folder(folder), [((1, 64), 10)])
    rows = result["precisions"]["float32"]["backends"]
    assert newcomer in rows and rows[newcomer]["loss"] == 0.0

    # The embedding command filters the registry's backends by ``only``: none of a constant list.
    encoder = SentenceEncoder.from_folder(save_tiny_encoder(tmp_path / "enc", "bert", layers=1))
    result = embedding_quality.measure(encoder, 1, 64, only=[newcomer])
    rows = result["precisions"]["float32"]["backends"]
    assert list(rows) == [newcomer] and rows[newcomer]["min_cosine"] >= 1 - 1e-6


# --------------------------------------------------------------------- no hand-written lists

# Where a listing of backends would live: benchmarks, the model and service code outside the
# backends themselves, and the GPU tests.
SCANNED = ("benchmarks", "models", "service", "tests/gpu")
# A literal naming this many registered backends enumerates them (a test or script picking two
# or three backends for a purpose is a choice, not a listing).
LISTING = 4
# A deliberate subset says so, with its reason, in a comment on the line above the literal.
SELECTION = "# a selection:"


def _listings(path: Path) -> Iterator[int]:
    """Line numbers of list, tuple and set literals (and dict keys) in ``path`` that name at
    least :data:`LISTING` registered backends, unless the line above marks a selection."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items: list[ast.expr | None] = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        else:
            continue
        named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in BACKENDS}
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        if len(named) >= LISTING and not above.startswith(SELECTION):
            yield node.lineno


def test_no_hand_written_list_of_backends() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not path.is_relative_to(ROOT / "models" / "attention")  # the backends themselves
        for line in _listings(path)
    ]
    assert not found, f"iterate over models.attention.registry.names() instead: {found}"


def test_the_listing_check_finds_a_hand_written_list(tmp_path: Path) -> None:
    listed = tmp_path / "table.py"
    rows = list(BACKENDS[:LISTING])
    listed.write_text(
        f"ROWS = {rows!r}\nOTHER = ('flash', 'full')\n{SELECTION} why\nS = {rows!r}\n"
    )
    assert list(_listings(listed)) == [1]
