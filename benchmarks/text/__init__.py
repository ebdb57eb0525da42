"""Text models in process: encoding against sentence-transformers (:mod:`.encoder`), one text
per forward against ONNX Runtime (:mod:`.batch_one`, per op with ``--ops``), fused linear layers
(:mod:`.fused_linear`), precisions (:mod:`.precision`), thread settings (:mod:`.threads`), long
documents (:mod:`.long_document_speed`, :mod:`.long_text_retrieval`) and reranking
(:mod:`.rerank_speed`, :mod:`.rerank_long`). Each is ``python -m benchmarks.text.<name>``."""
