"""Sentence encoders' closeness to exact attention against the attention kernel's time: every
approximate backend at several values of its budget option (``Backend.budget``: landmarks,
features, block or bucket size), so the backends can be compared at equal kernel time.

    python -m benchmarks.text.budget_quality                            # MiniLM and all-mpnet-base-v2
    python -m benchmarks.text.budget_quality --models all-MiniLM-L6-v2 --backends bigbird nystrom

Texts: ``length_spread(--per-bin)`` of the shipped docstring corpus (five word-count bins, a few
tokens to past 256), cut at the model's limit. For each model, backend and budget: the mean and
minimum cosine of each text's unit embedding to the exact one (``full``), and the mean over the
texts longer than 128 tokens; beside them, the attention kernel alone (``models.attention.attend``
on one row of the model's heads and head width at ``--kernel-length`` tokens, median of
``--repeats`` calls on ``--threads`` threads) and its time as a multiple of ``flash``'s, whose row
leads each model's table. A backend the model cannot run (a relative position bias that only a
backend forming the scores can add) gets one row saying why. ``--smoke``: 10 texts, MiniLM, the
smallest budget, one repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report
from benchmarks.harness.timing import median_ms
from models.attention import BACKENDS, AttentionError, attend, get_backend
from models.names import TEXT_MODEL
from models.text import SentenceEncoder
from models.text.folders.packaged import PACKAGED, packaged_folder
from models.text.quality.corpus import length_spread
from tests.attention_inputs import structured_qkv

OUT = RESULTS / "budget-quality-cpu.md"
MODELS = (TEXT_MODEL, *PACKAGED)
APPROXIMATE = tuple(b for b in BACKENDS if not get_backend(b).exact)
LONG = 128  # tokens: the texts past this are the ones a small budget approximates


def load(name: str) -> SentenceEncoder:
    """The shipped MiniLM or a packaged model's folder, as the server loads them."""
    if name == TEXT_MODEL:
        return SentenceEncoder.load()
    return SentenceEncoder.from_folder(packaged_folder(name), name)


def kernel_ms(
    encoder: SentenceEncoder, length: int, backend: str, options: dict[str, Any], repeats: int
) -> float:
    """Median ms of one attention call at the model's heads and head width, ``length`` tokens."""
    config = encoder.model.config
    q, k, v = structured_qkv(1, config.num_attention_heads, length, length, config.head_dim)
    with torch.inference_mode():
        return median_ms(lambda: attend(q, k, v, backend=backend, **options), repeats)


def cosines(got: torch.Tensor, ref: torch.Tensor, long: torch.Tensor) -> tuple[str, str, str]:
    """Mean, min and mean over the long texts of the rows' cosine, formatted."""
    c = F.cosine_similarity(got, ref, dim=-1)
    tail = f"{c[long].mean():.4f}" if bool(long.any()) else "-"
    return f"{c.mean():.4f}", f"{c.min():.4f}", tail


def budgets_of(backend: str, wanted: Sequence[int]) -> list[int]:
    """The values of ``backend``'s budget option among ``wanted`` that its range allows."""
    chosen = get_backend(backend)
    spec = chosen.options[chosen.budget or ""].describe()
    low, high = spec["minimum"], spec["maximum"]
    return [n for n in wanted if low <= n <= high]


def model_rows(name: str, args: Any) -> tuple[str, list[list[str]]]:
    """One model's paragraph and rows: flash first, then every backend at every budget."""
    encoder = load(name)
    ids = encoder.tokenize(length_spread(args.per_bin), truncate=True)
    lengths = torch.tensor([len(x) for x in ids])
    length = min(args.kernel_length, encoder.max_tokens)
    ref = encoder.embed(ids, backend="full")
    flash = kernel_ms(encoder, length, "flash", {}, args.repeats)
    config = encoder.model.config
    head = (
        f"**{name}**: {len(ids)} texts, {int(lengths.min())}-{int(lengths.max())} tokens "
        f"({int((lengths > LONG).sum())} over {LONG}); kernel at {length} tokens, "
        f"{config.num_attention_heads} heads of {config.head_dim}."
    )
    rows = [[name, "`flash` (exact)", "-", f"{flash:.2f}", "1.00x", "1.0000", "1.0000", "1.0000"]]
    long = lengths > LONG
    for backend in args.backends:
        budget = get_backend(backend).budget
        try:
            encoder.check_attention(backend, {})
        except AttentionError as refusal:
            reason = str(refusal).split(";")[0]
            rows.append([name, f"`{backend}`", "-", "-", "-", f"refused: {reason}", "", ""])
            continue
        for n in budgets_of(backend, args.budgets):
            options = {budget: n}
            got = encoder.embed(ids, backend=backend, options=options)
            ms = kernel_ms(encoder, length, backend, options, args.repeats)
            cells = [name, f"`{backend}`", f"{budget}={n}", f"{ms:.2f}", f"{ms / flash:.2f}x"]
            rows.append([*cells, *cosines(got, ref, long)])
            print(" | ".join(rows[-1]), flush=True)
    return head, rows


def main(argv: Sequence[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.threads(1),
        cli.repeats(9),
        cli.out(OUT),
        cli.names("--models", MODELS, choices=MODELS),
        cli.names("--backends", APPROXIMATE, choices=APPROXIMATE),
        cli.sizes("--budgets", (16, 32, 64, 128), help="values of each backend's budget option"),
        cli.sizes("--kernel-length", (256,), help="tokens of the timed kernel call"),
    )
    p.add_argument("--per-bin", type=int, default=40, help="texts per word-count bin")
    args = cli.parse(
        p, argv, models=[TEXT_MODEL], budgets=[16], repeats=1, per_bin=2, kernel_length=[64]
    )
    args.kernel_length = args.kernel_length[0]
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.text.budget_quality", argv)
    columns = ["model", "backend", "budget", "kernel ms", "x flash time", "mean cos", "min cos",
               f"mean cos, > {LONG} tokens"]  # fmt: skip
    for name in args.models:
        head, rows = model_rows(name, args)
        report.add(head).table(columns, rows, "lllrrrrr")
    report.write(args.out, "Closeness to exact attention against kernel time, per budget")


if __name__ == "__main__":
    main()
