"""The in-process reference rows: an encoder on batches of texts, or a cross-encoder scoring
rerank requests; no server, no HTTP, tokenization included (a server must do it too).

    .venv/bin/python -m benchmarks.peers.inprocess attnserve --texts T.json --out R.json
    .venv-peers/bin/python -m benchmarks.peers.inprocess sentence-transformers --folder DIR ...
    .venv-peers/bin/python -m benchmarks.peers.inprocess onnxruntime --folder DIR ...
    .venv-peers/bin/python -m benchmarks.peers.inprocess cross-encoder --folder DIR \
        --requests R.json --out O.json
    .venv/bin/python -m benchmarks.peers.inprocess attnserve-rerank --folder DIR ...

Encoders: attnserve's :class:`models.text.SentenceEncoder` (its default attention, as the server
runs it), ``SentenceTransformer(folder).encode`` (the model inside LitServe and the naive server,
run with their interpreter so the versions match) and ONNX Runtime (:mod:`.onnx_reference`);
texts per second at each of ``--batches``, best of ``--repeats`` passes, plus the embeddings of
the first ``--guard`` texts, so the runner can check every implementation computes the same model.

Rerankers: ``CrossEncoder.predict`` (inside the LitServe app; the reference scores) and
attnserve's ``TextClassifier``; requests per second ``per request`` (each request's pairs one
forward pass) and ``batch 32``, best of ``--repeats`` passes after a warm-up, plus every
request's scores in request order.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness.timing import alternating, rows_per_s

Encode = Callable[[list[str]], Any]


def _attnserve(
    folder: str | None, threads: int, precision: str | None = None
) -> tuple[Encode, dict[str, Any]]:
    from models.text import SentenceEncoder

    encoder = SentenceEncoder.load() if folder is None else SentenceEncoder.from_folder(folder)
    if precision is None:
        return (lambda texts: encoder.encode(texts).numpy()), {}
    twin = encoder.with_precision(precision)
    return (lambda texts: twin.encode(texts).numpy()), {"precision": precision}


def _sentence_transformers(folder: str | None, threads: int) -> tuple[Encode, dict[str, Any]]:
    from sentence_transformers import SentenceTransformer

    if folder is None:
        raise SystemExit("sentence-transformers needs --folder")
    model = SentenceTransformer(folder, device="cpu")
    return (lambda texts: model.encode(texts, batch_size=len(texts), convert_to_numpy=True)), {}


def _onnxruntime(folder: str | None, threads: int) -> tuple[Encode, dict[str, Any]]:
    from benchmarks.peers.onnx_reference import OrtEncoder, build

    if folder is None:
        raise SystemExit("onnxruntime needs --folder")
    # The session holds the model in memory once built: the files may go with the folder.
    with tempfile.TemporaryDirectory() as tmp:
        model, info = build(Path(folder), Path(tmp))
        encoder = OrtEncoder(model, Path(folder), threads)
    return encoder.encode, {**info, "spinning": encoder.spinning}


Implementation = Callable[[str | None, int], tuple[Encode, dict[str, Any]]]
IMPLEMENTATIONS: dict[str, Implementation] = {
    "attnserve": _attnserve,
    "attnserve-bfloat16": partial(_attnserve, precision="bfloat16"),
    "sentence-transformers": _sentence_transformers,
    "onnxruntime": _onnxruntime,
}
PASS = 32  # pairs per forward pass in the batched rerank shape
Score = Callable[[list[tuple[str, str]], int], list[float]]


def _cross_encoder(folder: str) -> Score:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(folder, device="cpu")
    return lambda pairs, batch: [
        float(s) for s in model.predict(pairs, batch_size=batch, convert_to_numpy=True)
    ]


def _attnserve_rerank(folder: str) -> Score:
    from models.text.classifier import DEFAULT_ATTENTION, TextClassifier

    model = TextClassifier.from_folder(Path(folder))
    backend = DEFAULT_ATTENTION  # what the server runs when a request names none

    def score(pairs: list[tuple[str, str]], batch: int) -> list[float]:
        rows = model.tokenize(pairs)
        return model.scores(model.logits(rows, backend, max_batch_size=batch))[:, 0].tolist()

    return score


RERANKERS = {"cross-encoder": _cross_encoder, "attnserve-rerank": _attnserve_rerank}


def rerank(args: argparse.Namespace) -> dict[str, Any]:
    """The rerank rows (per request, batch 32) and every request's scores."""
    requests = [(q, d) for q, d in json.loads(args.requests.read_text())]
    score = RERANKERS[args.impl](args.folder)
    per_request = [[(q, d) for d in docs] for q, docs in requests]
    flat = [p for pairs in per_request for p in pairs]
    shapes: dict[str, Callable[[], Any]] = {
        "per request": lambda: [score(pairs, len(pairs)) for pairs in per_request],
        f"batch {PASS}": lambda: score(flat, PASS),
    }
    rows = []
    for shape, run in shapes.items():
        timed = alternating({shape: run}, args.repeats)[shape]  # a warm-up, then --repeats passes
        best_wall, best_cpu = min(timed.wall), min(timed.cpu)
        rows.append({
            "shape": shape,
            "req_per_s": len(requests) / best_wall,
            "pairs_per_s": len(flat) / best_wall,
            "cpu_ms_per_request": best_cpu * 1000.0 / len(requests),
        })  # fmt: skip
    scores = [score(pairs, len(pairs)) for pairs in per_request]
    impl = args.impl.removesuffix("-rerank")
    return {"impl": impl, "threads": torch.get_num_threads(), "rows": rows, "scores": scores}


def encode(args: argparse.Namespace) -> dict[str, Any]:
    """The encode rows (one per batch size) and the embeddings of the first ``--guard`` texts."""
    texts = json.loads(args.texts.read_text())
    run, info = IMPLEMENTATIONS[args.impl](args.folder, args.threads)
    rows = []
    for batch in args.batches:
        rate, cpu_ms = rows_per_s(run, texts, batch, args.repeats)
        rows.append({"batch": batch, "texts_per_s": rate, "cpu_ms_per_text": cpu_ms})
    guard = run(texts[: args.guard])
    return {
        "impl": args.impl,
        "rows": rows,
        "texts": len(texts),
        "threads": args.threads,
        "torch_threads": torch.get_num_threads(),
        **info,
        "guard": [[float(x) for x in row] for row in guard],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("impl", choices=sorted([*IMPLEMENTATIONS, *RERANKERS]))
    parser.add_argument("--texts", type=Path, help="JSON list of texts (encoders)")
    parser.add_argument("--requests", type=Path, help="[[query, [doc, ...]], ...] (rerankers)")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    parser.add_argument("--folder", help="model folder (attnserve: default the shipped one)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 1])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--guard", type=int, default=16, help="texts whose embeddings are kept")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out.write_text(json.dumps(rerank(args) if args.impl in RERANKERS else encode(args)))


if __name__ == "__main__":
    main()
