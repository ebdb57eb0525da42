"""Training and evaluating forecasters: everything ``attnserve train`` and ``attnserve evaluate``
run on a CSV, apart from the networks they train (``models/informer``, transformers' PatchTST).

- reading data: :mod:`.csv_file` (the file's text and header), :mod:`.table` (dates, values and
  steps checked into a ``SeriesTable``), :mod:`.splits` (train / val / test borders, scaling),
  :mod:`.source` (the data record a checkpoint keeps), :mod:`.data` (the ETTh1 reference loader,
  sliding windows);
- the closed-form linear baseline every forecaster is scored against, and the Informer's linear
  path starts from: :mod:`.linear`;
- Informer: :mod:`.informer_train` (``attnserve train``), :mod:`.informer_fit` (the loop),
  :mod:`.informer_evaluate` (``attnserve evaluate``, ``RESULTS.md``), :mod:`.metrics`;
  ``train_etth1.sh`` and ``train_ettm1.sh`` retrain the shipped checkpoints;
- transformers forecasters: :mod:`.patchtst_train` (needs the ``transformers`` extra),
  :mod:`.hf_evaluate` (``attnserve evaluate FOLDER``).

The serving path (``service/``, the forecasters' ``prepare``/``predict``) never imports this
package; the scaler a checkpoint carries is :mod:`models.informer.scaler`.
"""
