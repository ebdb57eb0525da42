"""Memory estimates on CUDA against ``torch.cuda.max_memory_allocated`` (reset per call).

Marked `gpu`: skipped cleanly where no CUDA device is present (tests/conftest.py). The stated
factors are those of the CPU tests: ``full`` within 20 %, the others within 2x either way.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from models.attention import AttentionCall, attend, attention_bytes
from models.informer.config import preset
from models.informer.memory import forward_bytes
from models.informer.model import Informer, attention_plan

pytestmark = pytest.mark.gpu

FACTOR = {"full": (0.8, 1.2)}
DEFAULT_FACTOR = (0.5, 2.0)


def cuda_peak(fn: Callable[[], object]) -> int:
    """Peak bytes allocated while ``fn`` runs, above what was allocated before."""
    fn()  # warm-up: cuBLAS workspaces and kernel selection stay out of the reading
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def within(backend: str, estimate: int, measured: int) -> None:
    low, high = FACTOR.get(backend, DEFAULT_FACTOR)
    assert low <= estimate / measured <= high, (
        f"{backend}: estimate {estimate / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB"
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("backend", ["full", "flash", "performer"])
def test_attention_at_2048(backend: str, batch: int, dtype: torch.dtype) -> None:
    b, h, n, d = batch, 4, 2049, 16
    gen = torch.Generator(device="cuda").manual_seed(0)

    def heads() -> torch.Tensor:  # a projection's head-split view, as the models pass it
        x = torch.randn(b, n, h * d, device="cuda", generator=gen, dtype=dtype)
        return x.view(b, n, h, d).transpose(1, 2)

    q, k, v = heads(), heads(), heads()
    # bf16 runs as the server runs it: under autocast (full's softmax then comes out in fp32).
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=dtype == torch.bfloat16)
    with torch.inference_mode(), autocast:
        measured = cuda_peak(lambda: attend(q, k, v, backend=backend))
    call = AttentionCall(b, h, n, n, d, dtype.itemsize, device_type="cuda")
    within(backend, attention_bytes(backend, call), measured)


@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("backend", ["full", "flash", "performer"])
def test_informer_long_forward_at_2048(backend: str, batch: int) -> None:
    torch.manual_seed(0)
    config = preset("long", seq_len=2048, pred_len=96)
    model = Informer(config).cuda().eval()
    x = torch.randn(batch, config.seq_len, config.enc_in, device="cuda")
    marks = torch.rand(batch, config.seq_len, config.time_features, device="cuda")
    x_dec = torch.cat(
        [x[:, -config.label_len :], x.new_zeros(batch, config.pred_len, config.enc_in)], dim=1
    )
    dec_marks = torch.rand(batch, config.dec_len, config.time_features, device="cuda")
    with torch.inference_mode():
        measured = cuda_peak(lambda: model(x, marks, x_dec, dec_marks, backend=backend))
    plan = attention_plan(config, backend, device_type="cuda")
    within(backend, forward_bytes(config, plan, batch, device_type="cuda"), measured)
