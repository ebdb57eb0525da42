"""Long documents through a decoder LLM embedder: each backend on a Qwen3-Embedding-0.6B-shaped
model at 4K-32K tokens, one request alone and at 8 concurrent clients.

    .venv/bin/python -m benchmarks.text.long_decoder [--lengths 4096 16384 32768] [--layers 1]
        [--capacity-lengths 4096 16384] [--clients 8]

The model has Qwen3-Embedding-0.6B's shape (:data:`SHAPE`: hidden 1024, 16 query heads sharing 8
key/value heads, head width 128, gated MLP of 3072) at ``--layers`` layers (28 in the real model;
fewer here so a 32K-token request takes seconds, not minutes: every layer is alike, so per-layer
ratios carry over) with **random weights** and all-MiniLM-L6-v2's tokenizer (its vocabulary sizes
the embedding table; nothing is downloaded). It is served as a sentence-transformers folder
(last-token pooling, Normalize), so requests run through transformers' own Qwen3 layers with our
backends in their causal forms (:mod:`models.hf_text`); ``nystrom`` and ``skyformer`` have none
and fall back to exact attention (their rows say so).

One-request latency (:func:`benchmarks.text.long_document_speed.http_latencies`): the median of
``POST /encode`` in-process, the estimated peak activation memory the server admits a request by
(``full`` beyond ``--full-max`` tokens is not sent: the memory budget refuses it, and the table
says with what estimate), the cosine to ``flash`` and the speed-up over it. The reference row is
transformers' ``Qwen3Model`` with its own SDPA attention, called directly on the same weights.
``--floor`` adds the same request with every attention call a stub (the attention-free floor).

Capacity (``--capacity-lengths``): ``attnserve serve`` in its own process, driven over HTTP by
the harness's raw-socket client (:mod:`benchmarks.harness.capacity`): p50 of one client alone and
requests/s at ``--clients`` clients, each against ``flash`` (``--capacity-backends``: which
backends; those without a causal form run ``flash`` and may be left out).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

import models.hf_forecast.bridge as bridge
from benchmarks.harness import capacity, cli
from benchmarks.harness.report import RESULTS, Report, write_json
from benchmarks.text.long_document_speed import (
    LONG_REQUESTS,
    http_latencies,
    latency_record,
    plot,
    reference_latencies,
    row_label,
    table,
    text_of,
)
from models.attention import BACKENDS, get_backend
from models.text.folders.weights import model_dir
from models.text.tokens.tokenizer import TextTokenizer

MODEL = "Qwen3-Embedding-0.6B's shape (last-token pooling)"
SHAPE: dict[str, Any] = {
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
}
MAX_TOKENS = 32768


def build_folder(folder: Path, layers: int) -> Path:
    """A random-weight Qwen3 at :data:`SHAPE` (``layers`` deep) saved as sentence-transformers
    saves an embedder: the backbone, last-token pooling, Normalize, MiniLM's tokenizer."""
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(**{**SHAPE, "num_hidden_layers": layers}, vocab_size=30522, pad_token_id=0)
    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    Qwen3Model(config).eval().save_pretrained(str(folder), safe_serialization=True)
    shutil.copy(model_dir() / "tokenizer.json", folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": MAX_TOKENS}))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]  # fmt: skip
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"embedding_dimension": SHAPE["hidden_size"], "pooling_mode": "lasttoken"}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "2_Normalize").mkdir(exist_ok=True)
    return folder


def last_token_normalised(states: torch.Tensor) -> torch.Tensor:
    """``[L, c]`` token states -> the last token's, unit length (the folder's pooling)."""
    return torch.nn.functional.normalize(states[-1], dim=0)


def refusals(folder: Path, texts: dict[int, str], args: Any) -> dict[str, str]:
    """What the server answers ``full`` beyond ``--full-max`` tokens (its ``[16, n, n]`` scores):
    admitted, or refused by the memory budget before it runs (status and message), beside the
    estimate it was judged by."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    settings = Settings(models=(str(folder),), device="cpu", background_load=False)
    out = {}
    with TestClient(create_app(settings)) as client:
        encoder = client.app.state.attnserve.registry.find(folder.name).model  # type: ignore[attr-defined]
        for length, text in sorted(texts.items()):
            if length <= args.full_max:
                continue
            body = {"model": folder.name, "inputs": [text], "attention": "full"}
            answer = client.post("/encode", json=body)
            tokens = len(encoder.tokenize([text], truncate=True)[0])
            estimate = encoder.memory_estimate("full", None, 1, tokens) / 2**30
            if answer.status_code == 200:
                verdict = f"admitted and answered (estimated peak {estimate:.1f} GiB)"
            else:
                message = answer.json().get("error", {}).get("message", "")
                verdict = (
                    f"refused, {answer.status_code} (estimated peak {estimate:.1f} GiB): {message}"
                )
            out[str(length)] = verdict
            print(f"full {length}: {verdict}", flush=True)
    return out


def decoder_capacity(tmp: Path, args: Any) -> dict[str, dict[int, capacity.Capacity]]:
    """:func:`benchmarks.harness.capacity.serve` of ``POST /encode``, one text per request."""
    folder = build_folder(tmp / "qwen3-capacity", args.layers)
    count = TextTokenizer(folder / "tokenizer.json", MAX_TOKENS).count

    precisions = list(args.precisions)

    def body(text: str, backend: str, precision: str) -> dict[str, Any]:
        out = {"model": folder.name, "inputs": [text], "attention": backend}
        return out if precisions == ["float32"] else {**out, "precision": precision}

    def bodies(length: int) -> dict[str, list[Any]]:
        text = text_of(length, count)
        return {
            row_label(b, p, precisions): [body(text, b, p)]
            for b in args.capacity_backends or args.backends
            for p in precisions
            if b != "full" or length <= args.full_max
        }

    flags = (*LONG_REQUESTS, "--precisions", ",".join(precisions))
    return capacity.serve(folder, "/encode", bodies, args, flags)


def fallback_note(backends: list[str]) -> str:
    """The rows whose layers run exact attention (backends without a causal form)."""
    names = [f"`{b}`" for b in backends if not get_backend(b).capabilities.causal]
    if not names:
        return ""
    return (
        f"{', '.join(names)} ha{'ve' if len(names) > 1 else 's'} no causal form: every layer "
        "runs `flash` instead (the answers' `x-attention-fallback` header says so), so those "
        "rows measure `flash` again."
    )


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.sizes("--lengths", [4096, 16384, 32768]),
        cli.names("--backends", BACKENDS),
        cli.repeats(1),
        cli.threads(torch.get_num_threads()),
    )
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--full-max", type=int, default=4096)
    parser.add_argument("--floor", action="store_true", help="add the attention-free floor")
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--output-prefix", type=Path, default=RESULTS / "long-decoder-cpu")
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=["float32"],
        choices=["float32", "bfloat16"],
        help="loaded in one server; one row per backend x precision (the first is the baseline)",
    )
    parser.add_argument(
        "--capacity-backends",
        nargs="*",
        choices=BACKENDS,
        help="backends of the capacity table (default: --backends); a fallback backend "
        "measures flash again",
    )
    capacity.options(parser, [4096, 16384])
    args = cli.parse(
        parser, argv, lengths=[64, 128], backends=["flash", "full", "bigbird"], layers=1,
        floor=True, full_max=64, capacity_lengths=[64], capacity_seconds=1.0,
    )  # fmt: skip
    args.capacity_layers = args.layers  # what the shared capacity code reads
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.text.long_decoder", argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp) / "qwen3-embedding-shape", args.layers)
        count = TextTokenizer(folder / "tokenizer.json", MAX_TOKENS).count
        texts = {n: text_of(n, count) for n in args.lengths}
        rows = http_latencies(folder, texts, args.backends, args, layers=bridge)
        refused = refusals(folder, texts, args) if "full" in args.backends else {}
        reference = None
        if not args.no_reference:
            reference = reference_latencies(
                folder, texts, args.repeats, "Qwen3Model", last_token_normalised
            )
        caps = decoder_capacity(Path(tmp), args) if args.capacity_lengths else {}
    result = {
        "model": MODEL,
        "title": "Qwen3-Embedding-0.6B shape, CPU",
        "reference_class": "Qwen3Model",
        "layers": args.layers,
        **latency_record(args, report, rows, reference),
        "refused": refused,
        "capacity": capacity.record_of(caps, args, layers=args.layers),
    }
    write_json(args.output_prefix.with_suffix(".json"), result)
    report.add(table(result))
    if refused:
        report.add(
            "`full` at the lengths it skips above, sent to a server with the default memory "
            "budget (half the available memory), which judges each request by its estimate "
            "before it runs: " + "; ".join(f"{n} tokens: {why}" for n, why in refused.items())
        )
    note = fallback_note(args.backends)
    if note:
        report.add(note)
    if caps:
        what = f"{MODEL}, one text per `POST /encode`"
        report.add(capacity.table_of(caps, args, what, result["baseline"]))
    report.write(args.output_prefix.with_suffix(".md"))
    plot(result, args.output_prefix.with_suffix(".png"))


if __name__ == "__main__":
    main()
