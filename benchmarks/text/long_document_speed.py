"""Long documents through HTTP: each backend on a ModernBERT embedder at 1K-8K tokens.

    .venv/bin/python -m benchmarks.text.long_document_speed [--lengths 1024 2048 4096 8192] [--repeats 1]
    .venv/bin/python -m benchmarks.text.long_document_speed --lengths 8192 --precisions float32 bfloat16 \
        --backends flash probsparse performer nystrom --floor --no-reference

The model has gte-modernbert-base's shape (:data:`SHAPE`: a global layer every third, ±64-token
windows elsewhere) with **random weights** (speed does not depend on them; cosines are to this
model's own exact embedding) and the all-MiniLM-L6-v2 tokenizer: nothing is downloaded. Per
backend and length: the median latency of ``POST /encode`` (one text, in-process HTTP), the
estimated peak activation memory (:meth:`SentenceEncoder.memory_estimate`, held to the measured
peak by ``tests/unit/test_model_memory.py``), the cosine to ``flash`` and the speed-up over
``flash``. The reference row is transformers' own ``ModernBertModel`` (SDPA, mean pooling) on the
same weights, called directly. ``full`` stops at ``--full-max`` tokens (its ``[12, n, n]`` scores).

``--precisions``: one server loads each (``Settings.precisions``), every backend runs in each
(the request's ``precision``), compared with ``flash`` in the first. ``--floor`` adds, per
precision, the same request with every global attention layer a stub returning its values (the
attention-free floor, as :mod:`benchmarks.forecast.forward_floor` measures it for Informer; the
local layers still run). Rows run in rounds (``--repeats``), so a slow spell of a shared machine
hits them alike.

Capacity (``--capacity-lengths``, empty: none): the same model at ``--capacity-layers`` layers
(3 by default: one global layer in three, as at full depth, so an 8K-token request takes seconds,
not tens of seconds) served by ``attnserve serve`` in its own process, driven over HTTP by the
harness's raw-socket client (:mod:`benchmarks.harness.capacity`): per backend and length, p50 of
one client alone beside requests/s at ``--clients`` concurrent clients, each against ``flash``,
with the server's busy cores and the client's CPU per request. ``--smoke``: one layer, 64 tokens,
``flash`` with the floor, capacity at 64 tokens.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.attention.common import attention_replaced
from benchmarks.harness import capacity, cli
from benchmarks.harness.host import load_average
from benchmarks.harness.report import RESULTS, Report, figure, log_axes, write_json
from benchmarks.harness.report import table as md_table
from models.attention import BACKENDS
from models.text.folders.weights import model_dir
from models.text.network import bert
from models.text.quality.corpus import word_windows
from models.text.tokens.tokenizer import TextTokenizer

FLOOR = "no attention (floor)"
WARM_TOKENS = 256  # each row's first request, unmeasured
# A single 8K-token text runs for seconds to tens of seconds here: lift the per-request compute
# bound (which would refuse it with a 422) and the timeout, as a long-document deployment would.
LONG_REQUESTS = ("--max-request-compute-s", "0", "--request-timeout-s", "900")
# The capacity table's model, in words (its depth is --capacity-layers).
CAPACITY_MODEL = "the same shape, global attention every third layer as at full depth"
SHAPE: dict[str, Any] = {
    "hidden_size": 768,
    "num_hidden_layers": 22,
    "num_attention_heads": 12,
    "intermediate_size": 1152,
    "max_position_embeddings": 8192,
    "local_attention": 128,
    "global_attn_every_n_layers": 3,
    "global_rope_theta": 160_000.0,
    "local_rope_theta": 10_000.0,
}


def build_folder(folder: Path, layers: int, task: str = "") -> None:
    """A random-weight ModernBERT at :data:`SHAPE` (``layers`` deep) with MiniLM's tokenizer;
    ``task`` ``"classify"``: a one-label ``ModernBertForSequenceClassification`` (a reranker)."""
    from transformers import ModernBertConfig, ModernBertForSequenceClassification, ModernBertModel

    config = ModernBertConfig(
        **{**SHAPE, "num_hidden_layers": layers},
        vocab_size=30522,
        pad_token_id=0,
        cls_token_id=101,
        sep_token_id=102,
        bos_token_id=101,
        eos_token_id=102,
    )
    cls: type = ModernBertModel
    if task == "classify":
        config.num_labels = 1
        cls = ModernBertForSequenceClassification
    torch.manual_seed(0)
    cls(config).eval().save_pretrained(str(folder), safe_serialization=True)
    shutil.copy(model_dir() / "tokenizer.json", folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8192}))


def text_of(tokens: int, count: Any) -> str:
    """Real text (stdlib docstrings) of at most ``tokens`` tokens, as close as words allow."""
    words = word_windows(1, tokens)[0].split()
    lo, hi = 1, len(words)
    while lo < hi:  # the most words that fit
        mid = (lo + hi + 1) // 2
        if count([" ".join(words[:mid])])[0] <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def latency_record(
    args: argparse.Namespace,
    report: Report,
    rows: dict[str, dict[int, Any]],
    reference: dict[int, Any] | None,
) -> dict[str, Any]:
    """The result file's latency part: the run's settings, the host's load before and after,
    each row's cells by length and the reference's (none: ``--no-reference``)."""
    return {
        "threads": args.threads,
        "repeats": args.repeats,
        "lengths": args.lengths,
        "baseline": row_label("flash", args.precisions[0], args.precisions),
        "load_before": report.load_before,
        "load_after": load_average(),
        "rows": {b: {str(n): c for n, c in cells.items()} for b, cells in rows.items()},
        "reference": {str(n): c for n, c in (reference or {}).items()},
    }


def row_label(backend: str, precision: str, precisions: list[str]) -> str:
    """A row's name: the backend alone when only float32 runs (the old tables' rows)."""
    return backend if precisions == ["float32"] else f"{backend} {precision}"


def http_latencies(
    folder: Path, texts: dict[int, str], backends: list[str], args: Any, layers: Any = bert
) -> dict:
    """Median ``POST /encode`` seconds, embeddings, token counts and memory per row/length;
    ``layers``: the module whose ``attend`` the floor rows replace (our encoder's layers, or
    the bridge of a transformers backbone)."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import Settings

    precisions = list(args.precisions)
    # As LONG_REQUESTS: no compute bound, a long timeout.
    settings = Settings(
        models=(str(folder),),
        device="cpu",
        background_load=False,
        max_wait_ms=0.0,
        max_request_compute_s=0.0,
        request_timeout_s=900.0,
        precisions=tuple(precisions),
    )
    # (label, backend, precision, floor stub)
    runs = [(row_label(b, p, precisions), b, p, False) for b in backends for p in precisions]
    if args.floor:
        runs += [(row_label(FLOOR, p, precisions), "flash", p, True) for p in precisions]
    times: dict[str, dict[int, list[float]]] = {label: {} for label, *_ in runs}
    rows: dict[str, dict[int, dict[str, Any]]] = {label: {} for label, *_ in runs}
    with TestClient(create_app(settings)) as client:
        served = client.app.state.attnserve.registry.find(folder.name)  # type: ignore[attr-defined]
        encoders = served.models
        warm = text_of(WARM_TOKENS, encoders[precisions[0]].tokenizer.count)

        def post(backend: str, precision: str, text: str) -> tuple[float, dict[str, Any]]:
            body = {"model": folder.name, "inputs": [text], "attention": backend}
            if precisions != ["float32"]:
                body["precision"] = precision
            start = time.perf_counter()
            response = client.post("/encode", json=body)
            seconds = time.perf_counter() - start
            response.raise_for_status()
            return seconds, response.json()

        for _, backend, precision, stub in runs:
            with attention_replaced(layers, stub):
                post(backend, precision, warm)
        for round_ in range(args.repeats):
            for label, backend, precision, stub in runs:
                for length, text in sorted(texts.items()):
                    if backend == "full" and length > args.full_max:
                        continue
                    with attention_replaced(layers, stub):
                        seconds, answer = post(backend, precision, text)
                    times[label].setdefault(length, []).append(seconds)
                    tokens = answer["usage"]["tokens"]
                    rows[label][length] = {
                        "seconds": statistics.median(times[label][length]),
                        "vector": answer["embeddings"][0],
                        "tokens": tokens,
                        "memory_bytes": encoders[precision].memory_estimate(
                            backend, None, 1, tokens
                        ),
                    }
                    print(
                        f"round {round_ + 1}: {label:>28} {length:>5}: {seconds:.2f} s",
                        flush=True,
                    )
    return rows


def mean_pooled(states: torch.Tensor) -> torch.Tensor:
    """``[L, c]`` token states -> their mean (ModernBERT's sentence-transformers pooling)."""
    return states.mean(0)


def reference_latencies(
    folder: Path,
    texts: dict[int, str],
    repeats: int,
    model_class: str = "ModernBertModel",
    pool: Any = mean_pooled,
) -> dict[int, dict]:
    """transformers' own ``model_class`` (SDPA) on the same weights, called directly: seconds
    and the vector ``pool`` makes of the token states."""
    import transformers
    from tokenizers import Tokenizer

    cls = getattr(transformers, model_class)
    model = cls.from_pretrained(str(folder), attn_implementation="sdpa").eval()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128
    out: dict[int, dict] = {}
    for length, text in sorted(texts.items()):
        ids = torch.tensor([tokenizer.encode(text).ids])
        times = []
        with torch.inference_mode():
            for _ in range(repeats):
                start = time.perf_counter()
                states = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
                times.append(time.perf_counter() - start)
        out[length] = {"seconds": statistics.median(times), "vector": pool(states[0]).tolist()}
        print(f"transformers {length:>5}: {out[length]['seconds']:.2f} s", flush=True)
    return out


def encode_capacity(tmp: Path, args: Any) -> dict[str, dict[int, capacity.Capacity]]:
    """:func:`benchmarks.harness.capacity.serve` of ``POST /encode``, one text per request, on the model at
    ``--capacity-layers`` layers; ``full`` stops at ``--full-max`` tokens."""
    folder = tmp / "modernbert-capacity"
    build_folder(folder, args.capacity_layers)
    count = TextTokenizer(folder / "tokenizer.json", 8192).count

    def bodies(length: int) -> dict[str, list[Any]]:
        text = text_of(length, count)
        return {
            b: [{"model": folder.name, "inputs": [text], "attention": b}]
            for b in args.backends
            if b != "full" or length <= args.full_max
        }

    return capacity.serve(folder, "/encode", bodies, args, LONG_REQUESTS)


def _cell(cell: dict | None, ref: dict, memory: bool = True) -> str:
    """One length's cell: p50 s / estimated peak MiB / cosine / speed-up against ``ref``."""
    if cell is None:
        return "skipped (n² memory)"
    mib = f"{cell['memory_bytes'] / 2**20:.0f}" if memory else "-"
    cos = float(
        F.cosine_similarity(torch.tensor(cell["vector"]), torch.tensor(ref["vector"]), dim=0)
    )
    return f"{cell['seconds']:.2f} / {mib} / {cos:.4f} / {ref['seconds'] / cell['seconds']:.2f}x"


def table(result: dict) -> str:
    """The page's paragraph and table: one row per backend (x precision), one column per length."""
    lengths = [str(n) for n in result["lengths"]]
    baseline = result.get("baseline", "flash")
    flash = result["rows"][baseline]
    cells = [
        [f"`{backend}`", *(_cell(cells.get(n), flash[n]) for n in lengths)]
        for backend, cells in result["rows"].items()
    ]
    if result.get("reference"):
        ref = result["reference"]
        name = (
            f"transformers {result.get('reference_class', 'ModernBertModel')} (SDPA, direct call)"
        )
        cells.append([name, *(_cell(ref[n], flash[n], memory=False) for n in lengths)])
    against = f"; cosines and speed-ups against `{baseline}`." if baseline != "flash" else "."
    columns = ["backend", *(f"{n} tokens: p50 s / est. peak MiB / cos / × flash" for n in lengths)]
    model = result.get("model", "ModernBERT at gte-modernbert-base's shape")
    return (
        f"One-request latency: {model} ({result['layers']} "
        f"layers, random weights), {result['threads']} threads, {result['repeats']} request(s) "
        f"per cell; in-process HTTP, one text per request, one request at a time{against}\n\n"
        + md_table(columns, cells)
    )


def plot(result: dict, path: Path) -> None:
    """p50 latency against tokens per text, one line per row."""
    series = dict(result["rows"])
    if result.get("reference"):
        series["transformers (SDPA)"] = result["reference"]
    with figure(path) as (ax,):
        for name, cells in series.items():
            xs = sorted(int(n) for n in cells)
            ax.plot(xs, [cells[str(x)]["seconds"] for x in xs], marker="o", label=name)
        log_axes(ax, "tokens per text", "p50 latency per request, s")
        ax.set_title(result.get("title", "ModernBERT (gte-modernbert-base shape), CPU"))


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.sizes("--lengths", [1024, 2048, 4096, 8192]),
        cli.names("--backends", BACKENDS),
        cli.repeats(1),
        cli.threads(torch.get_num_threads()),
    )
    parser.add_argument("--layers", type=int, default=SHAPE["num_hidden_layers"])
    parser.add_argument("--full-max", type=int, default=4096)
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=["float32"],
        choices=["float32", "bfloat16", "int8"],
        help="loaded in one server; one row per backend x precision (the first is the baseline)",
    )
    parser.add_argument(
        "--floor", action="store_true", help="add the attention-free floor per precision"
    )
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--output-prefix", type=Path, default=RESULTS / "long-document-speed-cpu")
    capacity.options(parser, [2048, 8192])
    args = cli.parse(
        parser, argv, lengths=[64], backends=["flash"], layers=1, floor=True,
        capacity_lengths=[64], capacity_layers=1, capacity_seconds=1.0,
    )  # fmt: skip
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.text.long_document_speed", argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "modernbert-gte-shape"
        build_folder(folder, args.layers)
        count = TextTokenizer(folder / "tokenizer.json", 8192).count
        texts = {n: text_of(n, count) for n in args.lengths}
        rows = http_latencies(folder, texts, args.backends, args)
        reference = None if args.no_reference else reference_latencies(folder, texts, args.repeats)
        caps = encode_capacity(Path(tmp), args) if args.capacity_lengths else {}
    result = {
        "layers": args.layers,
        "precisions": args.precisions,
        **latency_record(args, report, rows, reference),
        "capacity": capacity.record_of(caps, args, layers=args.capacity_layers),
    }
    write_json(args.output_prefix.with_suffix(".json"), result)
    report.add(table(result))
    if caps:
        report.add(capacity.table_of(caps, args, f"{CAPACITY_MODEL}, one text per `POST /encode`"))
    report.write(args.output_prefix.with_suffix(".md"))
    plot(result, args.output_prefix.with_suffix(".png"))


if __name__ == "__main__":
    main()
