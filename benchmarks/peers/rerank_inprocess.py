"""The rerank benchmark's in-process rows: a cross-encoder scoring requests, no server, no HTTP.

    .venv-peers/bin/python -m benchmarks.peers.rerank_inprocess cross-encoder --folder DIR \
        --requests R.json --out O.json
    .venv/bin/python -m benchmarks.peers.rerank_inprocess attnserve --folder DIR ...

``cross-encoder`` is sentence-transformers' ``CrossEncoder.predict`` (the model inside the
LitServe app; its scores are the reference every server is checked against); ``attnserve`` is
attnserve's ``TextClassifier`` with its default backend, as the server runs it. Tokenization is
included. Two shapes: ``per request`` (each request's pairs one forward pass) and ``batch 32``
(all requests' pairs in forward passes of 32). Requests per second is the best of ``--repeats``
passes after a warm-up pass. The output also holds every request's scores, in request order.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

PASS = 32  # pairs per forward pass in the batched shape
Score = Callable[[list[tuple[str, str]], int], list[float]]


def _cross_encoder(folder: str) -> Score:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(folder, device="cpu")
    return lambda pairs, batch: [
        float(s) for s in model.predict(pairs, batch_size=batch, convert_to_numpy=True)
    ]


def _attnserve(folder: str) -> Score:
    from models.text.classifier import DEFAULT_ATTENTION, TextClassifier

    model = TextClassifier.from_folder(Path(folder))
    backend = DEFAULT_ATTENTION  # what the server runs when a request names none

    def score(pairs: list[tuple[str, str]], batch: int) -> list[float]:
        rows = model.tokenize(pairs)
        return model.scores(model.logits(rows, backend, max_batch_size=batch))[:, 0].tolist()

    return score


IMPLS = {"cross-encoder": _cross_encoder, "attnserve": _attnserve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("impl", choices=list(IMPLS))
    parser.add_argument("--folder", required=True)
    parser.add_argument("--requests", type=Path, required=True, help="[[query, [doc, ...]], ...]")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    requests: list[tuple[str, list[str]]] = [
        (q, d) for q, d in json.loads(args.requests.read_text())
    ]
    score = IMPLS[args.impl](args.folder)
    per_request = [[(q, d) for d in docs] for q, docs in requests]
    flat = [p for pairs in per_request for p in pairs]
    shapes: dict[str, Callable[[], Any]] = {
        "per request": lambda: [score(pairs, len(pairs)) for pairs in per_request],
        f"batch {PASS}": lambda: score(flat, PASS),
    }
    rows = []
    for shape, run in shapes.items():
        run()  # warm-up
        best_wall = best_cpu = float("inf")
        for _ in range(args.repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            best_wall = min(best_wall, time.perf_counter() - wall)
            best_cpu = min(best_cpu, time.process_time() - cpu)
        rows.append(
            {
                "shape": shape,
                "req_per_s": len(requests) / best_wall,
                "pairs_per_s": len(flat) / best_wall,
                "cpu_ms_per_request": best_cpu * 1000.0 / len(requests),
            }
        )
    scores = [score(pairs, len(pairs)) for pairs in per_request]
    args.out.write_text(
        json.dumps(
            {"impl": args.impl, "threads": torch.get_num_threads(), "rows": rows, "scores": scores}
        )
    )


if __name__ == "__main__":
    main()
