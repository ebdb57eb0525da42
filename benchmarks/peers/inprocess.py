"""The in-process reference rows: an encoder on batches of texts, no server, no HTTP.

    .venv/bin/python -m benchmarks.peers.inprocess attnserve --texts T.json --out R.json
    .venv-peers/bin/python -m benchmarks.peers.inprocess sentence-transformers --folder DIR ...
    .venv-peers/bin/python -m benchmarks.peers.inprocess onnxruntime --folder DIR ...

``attnserve`` is attnserve's own encoder (:class:`models.text.SentenceEncoder`, its default
attention backend, as the server runs it); ``sentence-transformers`` is
``SentenceTransformer(folder).encode``, the model inside LitServe and the naive server, run with
their interpreter so the versions match theirs; ``onnxruntime`` is the same weights exported and
optimized for ONNX Runtime, float32 (:mod:`.onnx_reference`). Tokenization is included in all
three, as a server must do it. For each of ``--batches``, texts per second is the best of
``--repeats`` passes over the texts in chunks of that size.

The output also holds the embeddings of the first ``--guard`` texts, so the runner can check that
every implementation computes the same model.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

Encode = Callable[[list[str]], Any]


def _attnserve(folder: str | None, threads: int) -> tuple[Encode, dict[str, Any]]:
    from models.text import SentenceEncoder

    encoder = SentenceEncoder.load() if folder is None else SentenceEncoder.from_folder(folder)
    return (lambda texts: encoder.encode(texts).numpy()), {}


def _attnserve_bfloat16(folder: str | None, threads: int) -> tuple[Encode, dict[str, Any]]:
    from models.text import SentenceEncoder

    encoder = SentenceEncoder.load() if folder is None else SentenceEncoder.from_folder(folder)
    twin = encoder.with_precision("bfloat16")
    return (lambda texts: twin.encode(texts).numpy()), {"precision": "bfloat16"}


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


IMPLEMENTATIONS = {
    "attnserve": _attnserve,
    "attnserve-bfloat16": _attnserve_bfloat16,
    "sentence-transformers": _sentence_transformers,
    "onnxruntime": _onnxruntime,
}


def texts_per_s(encode: Encode, texts: list[str], batch: int, repeats: int) -> tuple[float, float]:
    """Best-of-``repeats`` texts/s over ``texts`` in chunks of ``batch``, and the CPU ms per
    text of that pass (all threads of this process)."""
    chunks = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    encode(chunks[0])  # first-call costs (allocator, lazy init) stay out of the timing
    best, best_cpu = float("inf"), float("nan")
    for _ in range(repeats):
        started, cpu0 = time.perf_counter(), time.process_time()
        for chunk in chunks:
            encode(chunk)
        elapsed = time.perf_counter() - started
        if elapsed < best:
            best, best_cpu = elapsed, (time.process_time() - cpu0) * 1000 / len(texts)
    return len(texts) / best, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("impl", choices=sorted(IMPLEMENTATIONS))
    parser.add_argument("--texts", type=Path, required=True, help="JSON list of texts")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    parser.add_argument("--folder", help="model folder (attnserve: default the shipped one)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 1])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--guard", type=int, default=16, help="texts whose embeddings are kept")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    texts = json.loads(args.texts.read_text())
    encode, info = IMPLEMENTATIONS[args.impl](args.folder, args.threads)
    rows = []
    for batch in args.batches:
        rate, cpu_ms = texts_per_s(encode, texts, batch, args.repeats)
        rows.append({"batch": batch, "texts_per_s": rate, "cpu_ms_per_text": cpu_ms})
    guard = encode(texts[: args.guard])
    args.out.write_text(
        json.dumps(
            {
                "impl": args.impl,
                "rows": rows,
                "texts": len(texts),
                "threads": args.threads,
                "torch_threads": torch.get_num_threads(),
                **info,
                "guard": [[float(x) for x in row] for row in guard],
            }
        )
    )


if __name__ == "__main__":
    main()
