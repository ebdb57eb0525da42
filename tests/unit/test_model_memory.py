"""Whole-model memory estimates (Informer, BERT encoder) against the measured peak on CPU.

One forward pass per backend at random init (memory does not depend on the values), measured
with the torch allocator's events (:mod:`models.profiling`). Stated factors: ``full`` within
20 %, the other backends within 1.6x either way (their fixed-size terms weigh more).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from models.attention import BACKENDS
from models.informer import InformerForecaster
from models.informer.checkpoint import save_checkpoint
from models.informer.config import preset
from models.informer.memory import forward_bytes as informer_bytes
from models.informer.model import Informer, LayerChoice, attention_plan
from models.informer.scaler import StandardScaler
from models.profiling import allocated_peak
from models.text.network import fused_linear
from models.text.network.bert import BertEncoder, PackedBatch
from models.text.network.config import BertConfig
from models.text.network.memory import forward_bytes as bert_bytes
from models.training.data.ett import ETTH1_CHANNELS
from tests.utils.informer import random_batch

pytestmark = pytest.mark.usefixtures("one_thread")

FACTOR = {"full": (0.8, 1.2)}
DEFAULT_FACTOR = (0.6, 1.6)


@pytest.fixture(autouse=True)
def own_rng() -> Iterator[None]:
    """The seeds set here stay here: the global torch generator is restored after each test,
    so later tests do not depend on which of these ran before them."""
    with torch.random.fork_rng():
        yield


def _within(backend: str, estimate: int, measured: int) -> None:
    low, high = FACTOR.get(backend, DEFAULT_FACTOR)
    assert low <= estimate / measured <= high, (
        f"{backend}: estimate {estimate / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB"
    )


@pytest.fixture(scope="module")
def long_informer() -> Informer:
    """The ``long`` preset (per-step tokens, d_model 64, 4 heads) at a 2048-step context."""
    with torch.random.fork_rng():  # module set-up runs outside the per-test own_rng
        torch.manual_seed(0)
        return Informer(preset("long", seq_len=2048, pred_len=96)).eval()


@pytest.mark.parametrize("backend", BACKENDS)
def test_informer_long_context_estimate(long_informer: Informer, backend: str) -> None:
    config = long_informer.config
    inputs = random_batch(config, 2)
    with torch.inference_mode():
        _, measured = allocated_peak(lambda: long_informer(*inputs, backend=backend))
    _within(backend, informer_bytes(config, attention_plan(config, backend), 2), measured)


@pytest.mark.parametrize("name", ["small", "patch"])
@pytest.mark.parametrize("backend", ["full", "flash", "performer"])
def test_informer_other_presets(name: str, backend: str) -> None:
    torch.manual_seed(0)
    config = preset(name, seq_len=336, pred_len=48)
    model = Informer(config).eval()
    inputs = random_batch(config, 8)
    with torch.inference_mode():
        _, measured = allocated_peak(lambda: model(*inputs, backend=backend))
    _within(backend, informer_bytes(config, attention_plan(config, backend), 8), measured)


def test_informer_estimate_is_linear_in_rows_and_follows_the_plan() -> None:
    config = preset("long", seq_len=2048, pred_len=96)
    full = [informer_bytes(config, attention_plan(config, "full"), n) for n in (1, 2, 32)]
    assert full[2] == pytest.approx(32 * full[0], rel=0.01)
    assert full[2] > 32 * 4 * 2049**2 * 4 * 2  # two [32, 4, 2049, 2049] float32 score matrices
    # nystrom cannot run the causal decoder self-attention: that layer falls back to exact
    # (fused) attention; each layer is priced as its plan says.
    plan = attention_plan(config, "nystrom")
    assert plan["decoder.0.self"].backend == "flash"
    with_full = {**plan, "encoder.0.self": LayerChoice("full", {})}
    assert informer_bytes(config, with_full, 32) > 2 * informer_bytes(config, plan, 32)


def test_forecaster_prices_a_compiled_batch_at_its_bucket(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Informer(preset("tiny", revin=True)).eval()
    scaler = StandardScaler(np.zeros(7), np.ones(7))
    save_checkpoint(tmp_path / "m", model, scaler, list(ETTH1_CHANNELS), {"backend": "full"})
    forecaster = InformerForecaster.load(str(tmp_path / "m"))
    three = forecaster.memory_estimate("flash", None, 3)
    assert forecaster.memory_estimate("flash", None, 4) > three
    forecaster.compiled_backends = frozenset({"flash"})
    forecaster.batch_buckets = (1, 4, 16)
    assert forecaster.memory_estimate("flash", None, 3) == forecaster.memory_estimate(
        "flash", None, 4
    )


# ----------------------------------------------------------------------------- text


@pytest.fixture(scope="module")
def minilm_shaped() -> BertEncoder:
    """all-MiniLM-L6-v2's shape (6 layers, 12 heads of 32, FFN 1536) at random init."""
    with torch.random.fork_rng():  # module set-up runs outside the per-test own_rng
        torch.manual_seed(0)
        model = BertEncoder(BertConfig()).eval()
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding):
                torch.nn.init.normal_(module.weight, std=0.02)
    # The oneDNN-packed weights are the model's (built at load by SentenceEncoder), not a
    # batch's activations: packed here, so the first measured forward does not count them.
    fused_linear.prepack(model)
    return model


@pytest.mark.parametrize("mixed", [False, True], ids=["padded", "mixed-lengths"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_text_encoder_estimate(minilm_shaped: BertEncoder, backend: str, mixed: bool) -> None:
    rows, length = 8, 128
    # One short row makes the batch padded; mixed lengths take fewer tokens than the estimate's
    # rows x padded length (priced as an upper bound, still within the backend's factor).
    gen = torch.Generator().manual_seed(0)
    others = torch.randint(length // 2, length + 1, (rows - 2,), generator=gen).tolist()
    lengths = [length, length - 5, *(others if mixed else [length] * (rows - 2))]
    batch = PackedBatch.from_lists([[101] * n for n in lengths], length, torch.device("cpu"))
    with torch.inference_mode():
        _, measured = allocated_peak(lambda: minilm_shaped.pooled(batch, backend, {}))
    _within(backend, bert_bytes(minilm_shaped.config, backend, {}, rows, length), measured)


def _random_encoder(raw: dict) -> BertEncoder:
    from models.text.network.architectures import read_config

    with torch.random.fork_rng():  # module set-up runs outside the per-test own_rng
        torch.manual_seed(0)
        with torch.device("meta"):
            model = BertEncoder(read_config(raw))
        model = model.to_empty(device="cpu").eval()
        for param in model.parameters():
            torch.nn.init.normal_(param, std=0.02)
    fused_linear.prepack(model)  # as in minilm_shaped: weights packed at load, not in a batch
    return model


@pytest.fixture(scope="module")
def modernbert_shaped() -> BertEncoder:
    """ModernBERT's layout (GeGLU, rotary, a global layer every 3rd, ±64-token windows) at a
    width small enough to measure a 2,048-token batch quickly."""
    return _random_encoder(
        {
            "model_type": "modernbert",
            "vocab_size": 1000,
            "hidden_size": 128,
            "intermediate_size": 192,
            "num_hidden_layers": 3,
            "num_attention_heads": 2,
            "max_position_embeddings": 8192,
            "local_attention": 128,
            "global_attn_every_n_layers": 3,
            "pad_token_id": 0,
        }
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_context_encoder_estimate(modernbert_shaped: BertEncoder, backend: str) -> None:
    """Global layers priced by the backend, local layers by the banded kernel: the estimate
    the batcher's memory budget relies on for 2K-8K-token texts."""
    rows, length = 2, 2048
    batch = PackedBatch.from_lists(
        [[5] * length, [5] * (length - 100)], length, torch.device("cpu")
    )
    with torch.inference_mode():
        _, measured = allocated_peak(lambda: modernbert_shaped.pooled(batch, backend, {}))
    config = modernbert_shaped.config
    _within(backend, bert_bytes(config, backend, {}, rows, length), measured)


def test_long_context_full_attention_grows_quadratically_and_flash_linearly(
    modernbert_shaped: BertEncoder,
) -> None:
    config = modernbert_shaped.config
    full = [bert_bytes(config, "full", {}, 1, n) for n in (2048, 8192)]
    flash = [bert_bytes(config, "flash", {}, 1, n) for n in (2048, 8192)]
    assert full[1] / full[0] > 12  # the [h, n, n] score matrices dominate
    assert flash[1] / flash[0] < 5
