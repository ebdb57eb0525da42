"""Text models in process: encoding against sentence-transformers (:mod:`.encoder`), one text
per forward against ONNX Runtime (:mod:`.batch_one`, per op :mod:`.batch_one_ops`), fused linear
layers (:mod:`.fused_linear`), precisions (:mod:`.precision`), thread settings (:mod:`.threads`),
long documents (:mod:`.long_document_speed`, :mod:`.long_text_retrieval`) and reranking
(:mod:`.rerank_speed`, :mod:`.rerank_long`). Each is ``python -m benchmarks.text.<name>``."""

# What CI runs: each module with ``--smoke`` (seconds to a minute, tiny sizes, nothing written
# under benchmarks/results/).
SMOKE = (
    "benchmarks.text.encoder",
    "benchmarks.text.batch_one",
    "benchmarks.text.batch_one_ops",
    "benchmarks.text.fused_linear",
    "benchmarks.text.precision",
    "benchmarks.text.threads",
    "benchmarks.text.long_document_speed",
    "benchmarks.text.long_text_retrieval",
    "benchmarks.text.rerank_speed",
    "benchmarks.text.rerank_long",
)
