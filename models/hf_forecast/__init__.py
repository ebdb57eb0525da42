"""Forecasters saved by Hugging Face transformers (``save_pretrained`` folders of
``PatchTSTForPrediction``, ``InformerForPrediction``, ``TimeSeriesTransformerForPrediction``),
served with our attention backends swapped in per request (:mod:`.bridge`). Loader:
:mod:`.folder` (recognise the folder, read its ``attnserve.json``) and
:meth:`HFForecaster.load <models.hf_forecast.forecaster.HFForecaster.load>`. Training and
evaluation: :mod:`models.training.patchtst_train`, :mod:`models.training.evaluate.hf`.

transformers is imported only when such a folder loads (``pip install 'attnserve[transformers]'``).
"""

from models.hf_forecast.folder import FolderError, is_forecast_folder

__all__ = ["FolderError", "is_forecast_folder"]
