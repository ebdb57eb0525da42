"""Measure how close each attention backend's embeddings come to exact attention.

    .venv/bin/python -m models.text.quality.embedding [--per-bin 120] [--output models/text/quality/quality.json]
    attnserve evaluate path/to/text-model-folder [--per-bin 40] [--max-tokens 2048]

Corpus: the standard-library docstrings shipped as a snapshot (:mod:`models.text.quality.corpus`), up to
``--per-bin`` texts from each of five word-count bins, so lengths run from a few tokens to past
256; for a model that takes longer texts, ``--per-bin`` more per doubling band up to its limit
(or ``--max-tokens``), cut from the docstrings laid end to end. Texts over the limit are
truncated, as sentence-transformers does. For each backend the model accepts, at its default
options, the script reports the mean and minimum cosine similarity of its (unit-norm) embedding
to the exact one (``full``; ``flash`` past 512 tokens, the same numbers without the L x L
matrix), overall and per token-length band, writes them to ``quality.json`` (the shipped MiniLM's
in ``models/text/``, a folder's inside the folder; ``attention: "auto"`` and the model card read
it) and prints a markdown table.

``--precisions bfloat16 int8`` also measures the encoder in those precisions (:mod:`models.precision`):
every backend, the reference included, against the float32 exact embedding, each precision's
figures in the same shape (:mod:`models.quality_file`). Every run measures float32 again, so
precisions measured before and not named again are dropped (they were measured against the
float32 reference this run replaces), and the command says which.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from models.attention import AttentionError, get_backend
from models.attention.registry import names
from models.names import DEFAULT_PRECISION
from models.quality_file import (
    backend_rows,
    backends_of,
    carried_precisions,
    dropped_precisions_note,
    merge_backends,
    read_quality,
    save_quality,
)
from models.text.encoder import SentenceEncoder
from models.text.quality.card import QUALITY_FILE
from models.text.quality.corpus import length_spread, load_snapshot, word_windows

REFERENCE = "full"
# Past this length the reference is flash: the same exact numbers without the L x L matrix.
FULL_REFERENCE_MAX_TOKENS = 512
# Token-length bands (special tokens included) for the per-length breakdown; longer models get
# doubling bands up to their limit (:func:`bands_for`).
BANDS: tuple[tuple[int, int], ...] = ((1, 64), (65, 128), (129, 256))


def bands_for(max_tokens: int) -> tuple[tuple[int, int], ...]:
    """:data:`BANDS`, then ``(257, 512)``, ``(513, 1024)``, ... up to ``max_tokens``."""
    bands = list(BANDS)
    while bands[-1][1] < max_tokens:
        low = bands[-1][1] + 1
        bands.append((low, min(2 * bands[-1][1], max_tokens)))
    return tuple(b for b in bands if b[0] <= max_tokens)


def reference_for(max_tokens: int) -> str:
    """The exact backend that measures a model of ``max_tokens``."""
    return REFERENCE if max_tokens <= FULL_REFERENCE_MAX_TOKENS else "flash"


def cosines_to_reference(
    encoder: SentenceEncoder,
    token_ids: list[list[int]],
    backends: list[str],
    reference_backend: str = REFERENCE,
) -> dict[str, torch.Tensor]:
    """Per-text cosine of each backend's embedding to the exact embedding: ``{name: [n]}``."""
    reference = encoder.embed(token_ids, backend=reference_backend)
    return {
        name: F.cosine_similarity(encoder.embed(token_ids, backend=name), reference, dim=-1)
        for name in backends
    }


def summarise(
    cos: torch.Tensor, lengths: list[int], bands_used: tuple[tuple[int, int], ...] = BANDS
) -> dict[str, Any]:
    """Mean / min cosine overall and per token-length band."""
    bands = {}
    for lo, hi in bands_used:
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
        f"{corpus['texts_cut_to_max_tokens']} cut to {corpus.get('max_tokens', 256)}); "
        f"exact reference: {result.get('reference', REFERENCE)}",
        "",
    ]
    backends = backends_of(result)
    bands = list(next(iter(backends.values()))["by_tokens"]) if backends else []
    lines.append(
        "| backend | options | mean cosine | min cosine | "
        + " | ".join(f"mean, {b} tokens" for b in bands)
        + " |"
    )
    lines.append("|---" * (4 + len(bands)) + "|")
    for name, row in backend_rows(result):
        shown, *by_band = row_cells(row, bands, "mean_cosine")
        lines.append(
            f"| `{name}` | {shown} | {row['mean_cosine']:.4f} | {row['min_cosine']:.4f} | "
            + " | ".join(by_band)
            + " |"
        )
    return "\n".join(lines)


def row_cells(row: Mapping[str, Any], bands: list[str], figure: str) -> list[str]:
    """A table row's options cell, then its ``figure`` per band of ``bands`` (``-`` where the
    band has none): the cells every ``attnserve evaluate`` table of a text model shares."""
    options = row["options"].items()
    shown = ", ".join(f"{k}={'auto' if v is None else v}" for k, v in options) or "-"
    by_tokens = row["by_tokens"]
    return [shown, *(f"{by_tokens[b][figure]:.4f}" if b in by_tokens else "-" for b in bands)]


def long_texts(encoder: SentenceEncoder, per_band: int, max_tokens: int) -> list[str]:
    """``per_band`` texts per band past 256 tokens, each about the band's upper length."""
    texts: list[str] = []
    for low, high in bands_for(max_tokens):
        if low <= BANDS[-1][1]:
            continue
        # ~1.3 tokens per word in this corpus: aim inside the band, cut to the limit anyway.
        words = int(0.7 * (low + high) / 2)
        texts.extend(word_windows(per_band, words))
    return texts


def measure(
    encoder: SentenceEncoder,
    per_bin: int,
    max_tokens: int,
    precisions: tuple[str, ...] = (),
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every accepted backend's cosine to the exact embedding on the corpus, and in each of
    ``precisions`` every backend's cosine to the float32 exact embedding (see module doc);
    ``only``: these backends alone (the reference is not scored in the precisions then)."""
    limit = min(encoder.max_tokens, max_tokens)
    bands = bands_for(limit)
    texts = length_spread(per_bin) + long_texts(encoder, per_bin, limit)
    token_ids = [ids[:limit] for ids in encoder.tokenize(texts, truncate=True)]
    lengths = [len(ids) for ids in token_ids]
    uncut = encoder.tokenizer.count(texts)
    reference = reference_for(limit)
    backends = []
    for name in names():
        if only is not None and name not in only:
            continue
        try:
            encoder.check_attention(name, None)
        except AttentionError:
            continue
        if name != reference:
            backends.append(name)
    cosines = cosines_to_reference(encoder, token_ids, backends, reference)
    exact = encoder.embed(token_ids, backend=reference)
    by_precision: dict[str, Any] = {}
    for precision in precisions:
        if precision == encoder.precision:
            continue
        twin = encoder.with_precision(precision)
        by_precision[precision] = {
            "backends": {
                name: {
                    "options": get_backend(name).resolve_options(None),
                    **summarise(
                        F.cosine_similarity(twin.embed(token_ids, backend=name), exact, dim=-1),
                        lengths,
                        bands,
                    ),
                }
                for name in ([reference] if only is None else []) + backends
            }
        }
    float32 = {
        "backends": {
            name: {
                "options": get_backend(name).resolve_options(None),
                **summarise(cosines[name], lengths, bands),
            }
            for name in backends
        }
    }
    return {
        "reference": reference,
        "metric": "cosine similarity of each text's embedding to the exact-attention embedding",
        "corpus": {
            "source": f"Python {load_snapshot()['python']} standard-library docstrings "
            "(modules, classes, functions; tests/idlelib/lib2to3 excluded)",
            "texts": len(texts),
            "max_tokens": limit,
            "tokens_min": min(lengths),
            "tokens_median": int(statistics.median(lengths)),
            "tokens_max_before_cut": max(uncut),
            "texts_cut_to_max_tokens": sum(n > limit for n in uncut),
        },
        "precisions": {DEFAULT_PRECISION: float32, **by_precision},
    }


def add_run_arguments(parser: argparse.ArgumentParser, reference: str) -> None:
    """``--threads``, ``--precisions`` and ``--show``, the same for every text model's
    evaluation; ``reference`` names what the precisions are measured against."""
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=[],
        choices=["bfloat16", "int8", "float16"],
        help=f"also measure these precisions against the float32 exact {reference}",
    )
    parser.add_argument(
        "--show", action="store_true", help="print the table of the output and stop"
    )


def write_quality(
    output: Path,
    result: dict[str, Any],
    measured: Sequence[str],
    elapsed: float,
    render: Callable[[dict[str, Any]], str],
) -> None:
    """Write ``result`` to ``output`` and print it (``render``). Every run measures float32
    again, so the figures of precisions measured before and not in ``measured`` are dropped
    (they were read against the float32 reference this run replaces), and the output says so
    (:func:`models.quality_loss.carried_precisions`)."""
    _, dropped = carried_precisions(read_quality(output), measured, reference_remeasured=True)
    save_quality(output, result)
    print(f"{elapsed:.0f} s\n")
    print(render(result))
    if dropped:
        print(f"\n{dropped_precisions_note(dropped)}")
    print(f"\nwrote {output}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="attnserve evaluate", description=__doc__.splitlines()[0])
    parser.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=None,
        help="a text model folder (default: the shipped all-MiniLM-L6-v2)",
    )
    parser.add_argument("--per-bin", type=int, default=120, help="texts per length bin")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="measure texts up to this length only"
    )
    parser.add_argument(
        "--output", type=Path, default=None, help="default: quality.json of the model"
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        default=None,
        choices=list(names()),
        help="measure these backends alone and add them to the existing quality.json (the "
        "same corpus: same --per-bin and --max-tokens), keeping every other figure",
    )
    add_run_arguments(parser, "embedding")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    encoder = SentenceEncoder.from_folder(args.folder) if args.folder else SentenceEncoder.load()
    output = args.output or encoder.quality_file or QUALITY_FILE
    if args.show:
        print(markdown(read_quality(output)))
        return
    start = time.perf_counter()
    result = measure(
        encoder,
        args.per_bin,
        args.max_tokens or encoder.max_tokens,
        tuple(args.precisions),
        args.backends,
    )
    if args.backends:
        result = merge_backends(read_quality(output), result)
        save_quality(output, result)
        print(f"{time.perf_counter() - start:.0f} s\n\n{markdown(result)}\n\nwrote {output}")
        return
    write_quality(output, result, args.precisions, time.perf_counter() - start, markdown)


if __name__ == "__main__":
    main()
