"""Measure how close each attention backend's embeddings come to the exact ``full`` backend.

    .venv/bin/python -m models.text.quality [--per-bin 120] [--output models/text/quality.json]

Corpus: docstrings of this Python's standard library (:mod:`models.text.corpus`), up to
``--per-bin`` texts from each of five word-count bins, so lengths run from a few tokens to past
256 (those are truncated to 256, as sentence-transformers does). For each backend at its default
options the script reports the mean and minimum cosine similarity of its (unit-norm) embedding to
``full``'s, overall and per token-length band, writes them to ``quality.json`` (read by
``SentenceEncoder.card()``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from models.attention import BACKENDS, get_backend
from models.text.corpus import length_spread
from models.text.encoder import QUALITY_FILE, SentenceEncoder

REFERENCE = "full"
# Token-length bands (special tokens included) for the per-length breakdown.
BANDS: tuple[tuple[int, int], ...] = ((1, 64), (65, 128), (129, 256))


def cosines_to_reference(
    encoder: SentenceEncoder, token_ids: list[list[int]], backends: list[str]
) -> dict[str, torch.Tensor]:
    """Per-text cosine of each backend's embedding to the ``full`` embedding: ``{name: [n]}``."""
    reference = encoder.embed(token_ids, backend=REFERENCE)
    return {
        name: F.cosine_similarity(encoder.embed(token_ids, backend=name), reference, dim=-1)
        for name in backends
    }


def summarise(cos: torch.Tensor, lengths: list[int]) -> dict[str, Any]:
    """Mean / min cosine overall and per token-length band."""
    bands = {}
    for lo, hi in BANDS:
        sel = torch.tensor([lo <= n <= hi for n in lengths])
        if sel.any():
            bands[f"{lo}-{hi}"] = {
                "texts": int(sel.sum()),
                "mean_cosine": round(float(cos[sel].mean()), 6),
                "min_cosine": round(float(cos[sel].min()), 6),
            }
    return {
        "mean_cosine": round(float(cos.mean()), 6),
        "min_cosine": round(float(cos.min()), 6),
        "by_tokens": bands,
    }


def markdown(result: dict[str, Any]) -> str:
    """The corpus line and one table row per backend, as printed by the script."""
    corpus = result["corpus"]
    lines = [
        f"{corpus['texts']} texts ({corpus['source']}), tokens {corpus['tokens_min']}-"
        f"{corpus['tokens_max_before_cut']} (median {corpus['tokens_median']}, "
        f"{corpus['texts_cut_to_max_tokens']} cut to 256)",
        "",
    ]
    bands = [f"{lo}-{hi}" for lo, hi in BANDS]
    lines.append(
        "| backend | options | mean cosine | min cosine | "
        + " | ".join(f"mean, {b} tokens" for b in bands)
        + " |"
    )
    lines.append("|---" * (4 + len(bands)) + "|")
    for name, row in result["backends"].items():
        options = row["options"].items()
        shown = ", ".join(f"{k}={'auto' if v is None else v}" for k, v in options) or "-"
        by_band = [f"{row['by_tokens'][b]['mean_cosine']:.4f}" for b in bands]
        lines.append(
            f"| `{name}` | {shown} | {row['mean_cosine']:.4f} | {row['min_cosine']:.4f} | "
            + " | ".join(by_band)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-bin", type=int, default=120, help="texts per word-count bin")
    parser.add_argument("--output", type=Path, default=QUALITY_FILE)
    parser.add_argument("--show", action="store_true", help="print the table of --output and stop")
    args = parser.parse_args()
    if args.show:
        print(markdown(json.loads(args.output.read_text(encoding="utf-8"))))
        return

    encoder = SentenceEncoder.load()
    texts = length_spread(args.per_bin)
    token_ids = encoder.tokenize(texts, truncate=True)
    lengths = [len(ids) for ids in token_ids]
    uncut = encoder.tokenizer.count(texts)
    backends = [b for b in BACKENDS if b != REFERENCE]

    start = time.perf_counter()
    cosines = cosines_to_reference(encoder, token_ids, backends)
    elapsed = time.perf_counter() - start

    result: dict[str, Any] = {
        "reference": REFERENCE,
        "metric": "cosine similarity of each text's embedding to the full-attention embedding",
        "corpus": {
            "source": f"Python {platform.python_version()} standard-library docstrings "
            "(modules, classes, functions; tests/idlelib/lib2to3 excluded)",
            "texts": len(texts),
            "tokens_min": min(lengths),
            "tokens_median": int(statistics.median(lengths)),
            "tokens_max_before_cut": max(uncut),
            "texts_cut_to_max_tokens": sum(n > encoder.max_tokens for n in uncut),
        },
        "backends": {
            name: {
                "options": get_backend(name).resolve_options(None),
                **summarise(cosines[name], lengths),
            }
            for name in backends
        },
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    print(f"{elapsed:.0f} s\n")
    print(markdown(result))
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
