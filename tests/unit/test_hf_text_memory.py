"""A transformers backbone's memory estimate (:mod:`models.hf_text.memory`) against the measured
peak on CPU, per backend, one row alone and a padded batch: the estimate the batcher's memory
budget admits a long request by. Measured with the torch allocator's events
(:mod:`models.profiling`), within the factors ``tests/unit/test_model_memory.py`` states for our
own encoders."""

from __future__ import annotations

import pytest
import torch

from models.attention import BACKENDS
from models.profiling import allocated_peak
from models.text import SentenceEncoder
from models.text.network.bert import PackedBatch
from models.text.network.costs import network_bytes
from tests.utils.tiny_decoders import save_tiny_decoder_encoder

pytestmark = pytest.mark.usefixtures("one_thread")

FACTOR = {"full": (0.7, 1.3)}
DEFAULT_FACTOR = (0.6, 1.6)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> SentenceEncoder:
    """Qwen3's layout (grouped heads, explicit head width, gated MLP) wide enough that
    activations, not fixed costs, decide the peak of a 1,024-token batch."""
    folder = tmp_path_factory.mktemp("decoder-memory") / "qwen3"
    save_tiny_decoder_encoder(
        folder,
        "qwen3",
        hidden_size=128,
        intermediate_size=384,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_seq_length=1024,
    )
    return SentenceEncoder.from_folder(folder)


@pytest.mark.parametrize("rows", [1, 2], ids=["alone", "padded"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_backbone_estimate(encoder: SentenceEncoder, backend: str, rows: int) -> None:
    length = 1024
    lengths = [length, length - 100][:rows]
    batch = PackedBatch.from_lists([[7] * n for n in lengths], length, torch.device("cpu"))
    with torch.inference_mode():
        _, measured = allocated_peak(lambda: encoder.model.pooled(batch, backend, {}))
    estimate = network_bytes(encoder.model, backend, None, rows, length, 4, "cpu")
    low, high = FACTOR.get(backend, DEFAULT_FACTOR)
    assert low <= estimate / measured <= high, (
        f"{backend}: estimate {estimate / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB"
    )
