"""ONNX Runtime as a reference row: all-MiniLM-L6-v2 exported, optimized and run in float32.

    .venv-peers/bin/python -m benchmarks.peers.onnx_reference --folder DIR --out DIR

What the fastest CPU deployments of a BERT-sized encoder do, here as
:mod:`.inprocess`'s ``onnxruntime`` implementation (and, from the command line, the export alone,
to inspect the graph):

1. ``torch.onnx.export`` of the sentence-transformers folder's model (the same weights every
   server loads) with mean pooling and L2 normalisation inside the graph, dynamic batch and
   length. The TorchScript exporter (``dynamo=False``) and eager attention: the optimizer's
   fusions match the subgraphs that exporter writes for BERT's eager attention, not SDPA's.
2. ``onnxruntime.transformers.optimizer.optimize_model(model_type="bert")``: fused Attention,
   SkipLayerNormalization, BiasGelu, EmbedLayerNormalization. The counts go with the results; a
   row without fused Attention is not the reference the issue asks for, so the export stops.
3. An ``InferenceSession`` on the CPU provider, float32, ``intra_op_num_threads`` = the threads
   every other row gets, one inter-op thread, spinning off when ``OMP_WAIT_POLICY`` is
   ``PASSIVE`` (as the torch rows' helpers then sleep); tokenization by the folder's own fast tokenizer
   (``tokenizer.json``: padding to the longest text, truncation at 256 tokens, as
   sentence-transformers does) is inside the timed call.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

MAX_LENGTH = 256  # sentence_bert_config.json's max_seq_length for all-MiniLM-L6-v2
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
REQUIRED_FUSIONS = ("Attention", "SkipLayerNormalization")


def export(folder: Path, out: Path) -> Path:
    """``folder``'s transformer with mean pooling and normalisation, as ONNX at ``out``."""
    import torch
    from transformers import AutoModel

    class Pooled(torch.nn.Module):
        """Mean over the unmasked tokens, then unit length (the folder's Pooling + Normalize)."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            token_type_ids: torch.Tensor,
        ) -> torch.Tensor:
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state  # [b, n, 384]
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [b, n, 1]
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # [b, 384]
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    bert = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    model = Pooled(bert).eval()
    ids = torch.ones(2, 8, dtype=torch.int64)
    axes = {0: "batch", 1: "length"}
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(out),
            input_names=list(INPUTS),
            output_names=["embedding"],
            dynamic_axes={**{name: axes for name in INPUTS}, "embedding": {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return out


def optimize(raw: Path, out: Path, folder: Path) -> dict[str, int]:
    """Fuse ``raw`` with onnxruntime's transformer optimizer into ``out``; the fused counts.

    Raises:
        RuntimeError: a fusion in :data:`REQUIRED_FUSIONS` did not happen.
    """
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((folder / "config.json").read_text())
    model = optimize_model(
        str(raw),
        model_type="bert",
        num_heads=int(config["num_attention_heads"]),
        hidden_size=int(config["hidden_size"]),
    )
    model.save_model_to_file(str(out))
    fused = {k: int(v) for k, v in model.get_fused_operator_statistics().items() if v}
    missing = [op for op in REQUIRED_FUSIONS if not fused.get(op)]
    if missing:
        raise RuntimeError(f"onnxruntime's optimizer did not fuse {missing}: got {fused}")
    return fused


class OrtEncoder:
    """Texts in, unit-length embeddings out, through one optimized ONNX Runtime session."""

    def __init__(self, model: Path, folder: Path, threads: int) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # ONNX Runtime's own thread pool spins between ops like libgomp's; it follows the
        # OMP_WAIT_POLICY the other rows run with, so every row waits the same way.
        spin = "0" if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE" else "1"
        options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        self.spinning = spin == "1"
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_LENGTH)
        pad = self.tokenizer.token_to_id("[PAD]")
        self.tokenizer.enable_padding(pad_id=pad, pad_token="[PAD]")  # to the longest text

    def encode(self, texts: list[str]) -> np.ndarray:
        """[b, 384] float32 embeddings of ``texts``."""
        encodings = self.tokenizer.encode_batch(texts)
        feeds = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        (embedding,) = self.session.run(None, feeds)
        return np.asarray(embedding)


def build(folder: Path, workdir: Path) -> tuple[Path, dict[str, Any]]:
    """Export and optimize into ``workdir``: the optimized model and what to record of it."""
    import onnxruntime
    import torch
    import transformers

    raw = export(folder, workdir / "model.onnx")
    optimized = workdir / "model-optimized.onnx"
    fused = optimize(raw, optimized, folder)
    info = {
        "fused": fused,
        "opset": OPSET,
        "versions": {
            "onnxruntime": onnxruntime.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }
    return optimized, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="sentence-transformers folder")
    parser.add_argument("--out", type=Path, required=True, help="folder for the .onnx files")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model, info = build(args.folder, args.out)
    print(json.dumps({"model": str(model), **info}, indent=2))


if __name__ == "__main__":
    main()
