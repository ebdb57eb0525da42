"""Which kernel each text linear layer runs (models.text.network.fused_linear), over every input that
decides it: the op (plain, GELU, residual), the layer (as loaded, laid out ``[i, o]`` by
``prepack``, int8), rows, dtype, threads, autograd, the oneDNN switch and compiling.

The kernel that ran is read off the ops dispatched (a ``TorchDispatchMode``), not off the
module's own choice, so the table below is checked against what actually runs."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from models.text.network import fused_linear

needs_onednn = pytest.mark.skipif(
    not fused_linear.ENABLED, reason="torch.ops.mkldnn._linear_pointwise unavailable here"
)

OPS = ("linear", "gelu", "residual")
LAYERS = ("loaded", "prepacked", "int8")
ROWS = (1, fused_linear.MIN_ROWS - 1, fused_linear.MIN_ROWS, fused_linear.MKL_MAX_ROWS, 65)
DTYPES = (torch.float32, torch.bfloat16, torch.float64)
GRAD_MODES: dict[str, Callable[[], Any]] = {
    "inference": torch.inference_mode,
    "no_grad": torch.no_grad,
    "grad": lambda: torch.set_grad_enabled(True),
}


class Dispatched(TorchDispatchMode):
    """Records the name of every op dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def kernel_that_ran(ops: list[str]) -> str:
    """The kernel among ``ops`` (dispatched ops, and ``F.linear`` where it was called)."""
    if any(op.startswith("quantized.") for op in ops):
        return "module"
    if any("mkldnn._linear_pointwise" in op for op in ops):
        return "onednn"
    if "aten.addmm_.default" in ops:
        return "addmm_"  # the residual's GEMM with beta = 1, over whichever weight layout
    if "F.linear" in ops:
        return "eager"
    if {"aten.addmm.default", "aten.mm.default", "aten.matmul.default"} & set(ops):
        return "mkl"  # addmm / mm on the [i, o] weight
    raise AssertionError(f"no linear kernel among {ops}")


def expected(
    op: str,
    layer: str,
    rows: int,
    dtype: torch.dtype,
    threads: int,
    grad: bool,
    onednn: bool,
    compiling: bool,
) -> str:
    """The table in ``fused_linear.choose_kernel``'s docstring, written out."""
    if layer == "int8":
        return "module"
    io = layer == "prepacked" and dtype == torch.float32  # prepack lays out float32 only
    mkl = (
        op != "gelu"
        and rows <= fused_linear.MKL_MAX_ROWS
        and dtype == torch.float32
        and io
        and not grad
        and threads == 1
    )
    onednn_runs = (
        onednn
        and not compiling
        and dtype in (torch.float32, torch.bfloat16)
        and rows >= fused_linear.MIN_ROWS
        and not grad
    )
    if op == "residual":
        return "onednn" if onednn_runs and not mkl else "addmm_"
    if mkl:
        return "mkl"
    return "onednn" if onednn_runs else "eager"


def make_layer(kind: str, dtype: torch.dtype, bias: bool) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.Linear(48, 40, bias=bias).to(dtype)
    if kind == "prepacked":
        fused_linear.prepack(nn.Sequential(layer))
    elif kind == "int8":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
            quantized = torch.ao.quantization.quantize_dynamic(
                nn.Sequential(layer), {nn.Linear}, dtype=torch.qint8
            )
        return quantized[0]
    return layer


def run(op: str, layer: nn.Module, x: Tensor, residual: Tensor) -> Tensor:
    calls: dict[str, Callable[[], Tensor]] = {
        "linear": lambda: fused_linear.linear(x, layer),
        "gelu": lambda: fused_linear.linear_gelu(x, layer),
        "residual": lambda: fused_linear.residual_linear(residual.clone(), x, layer),
    }
    return calls[op]()


@pytest.fixture(autouse=True)
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    with torch.random.fork_rng():
        yield
    torch.set_num_threads(before)


@needs_onednn
@pytest.mark.parametrize("compiling", [False, True])
@pytest.mark.parametrize("onednn", [True, False])
def test_each_case_runs_the_kernel_of_the_table(
    monkeypatch: pytest.MonkeyPatch, onednn: bool, compiling: bool
) -> None:
    # One layer without a bias, where the MKL path is a plain ``mm``.
    kinds = [(kind, dtype, True) for kind in LAYERS for dtype in DTYPES]
    kinds.append(("prepacked", torch.float32, False))
    layers = {
        (kind, dtype, bias): make_layer(kind, dtype, bias)
        for kind, dtype, bias in kinds
        if kind != "int8" or dtype == torch.float32  # int8 layers take float32 activations
    }
    monkeypatch.setattr(fused_linear, "ENABLED", onednn)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    wrong = []
    seen = Dispatched()
    eager = F.linear

    def spy(*args: Any, **kwargs: Any) -> Tensor:
        seen.ops.append("F.linear")
        return eager(*args, **kwargs)

    monkeypatch.setattr(F, "linear", spy)
    for (kind, dtype, bias), layer in layers.items():
        for op, rows, threads, mode in itertools.product(OPS, ROWS, (1, 2), GRAD_MODES):
            torch.set_num_threads(threads)
            x, residual = torch.randn(rows, 48, dtype=dtype), torch.randn(rows, 40, dtype=dtype)
            seen.ops.clear()
            with GRAD_MODES[mode](), seen:
                run(op, layer, x, residual)
            grad = mode == "grad"
            want = expected(op, kind, rows, dtype, threads, grad, onednn, compiling)
            got = kernel_that_ran(seen.ops)
            if got != want:
                wrong.append((op, kind, dtype, bias, rows, threads, mode, want, got))
    assert not wrong, f"{len(wrong)} cases ran another kernel, e.g. {wrong[:5]}"


@needs_onednn
def test_every_kernel_gives_the_eager_layer_result() -> None:
    torch.set_num_threads(1)
    for kind, rows in itertools.product(("loaded", "prepacked"), ROWS):
        layer, reference = (
            make_layer(kind, torch.float32, True),
            make_layer("loaded", torch.float32, True),
        )
        x, residual = torch.randn(rows, 48), torch.randn(rows, 40)
        with torch.inference_mode():
            eager = reference(x)
            assert torch.allclose(run("linear", layer, x, residual), eager, atol=1e-5)
            assert torch.allclose(run("gelu", layer, x, residual), F.gelu(eager), atol=1e-5)
            assert torch.allclose(run("residual", layer, x, residual), residual + eager, atol=1e-5)


def test_the_thread_count_is_read_only_where_it_decides() -> None:
    # Under torch.compile reading it is a graph break: a GELU, a residual without oneDNN and a
    # call over MKL_MAX_ROWS rows never read it.
    def threads() -> int:
        raise AssertionError("the thread count was read")

    facts: dict[str, Any] = {
        "dtype": torch.float32,
        "device": "cpu",
        "weight": fused_linear.Weight.COLUMNS,
        "threads": threads,
        "autograd": False,
        "compiling": True,
        "onednn": True,
    }
    eager = fused_linear.Kernel.EAGER
    assert fused_linear.choose_kernel(fused_linear.Op.GELU, 8, **facts) is eager
    assert fused_linear.choose_kernel(fused_linear.Op.RESIDUAL, 8, **facts) is eager
    rows = fused_linear.MKL_MAX_ROWS + 1
    assert fused_linear.choose_kernel(fused_linear.Op.LINEAR, rows, **facts) is eager
    facts["threads"] = lambda: 1
    assert fused_linear.choose_kernel(fused_linear.Op.LINEAR, 8, **facts) is fused_linear.Kernel.MKL
