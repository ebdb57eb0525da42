"""Forecasting: the attention trade through HTTP (:mod:`.trade`, tables in :mod:`.trade_report`),
what a request costs over its inference (:mod:`.overhead`) and before the model sees it
(:mod:`.parsing`), the attention-free floor (:mod:`.forward_floor`), a transformers PatchTST per
backend (:mod:`.hf`, quality :mod:`.hf_quality`) and the design ablation (:mod:`.ablation`).
Each is ``python -m benchmarks.forecast.<name>``."""
