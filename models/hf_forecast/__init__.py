"""Forecasters saved by Hugging Face transformers (``save_pretrained`` folders of
``PatchTSTForPrediction``, ``InformerForPrediction``, ``TimeSeriesTransformerForPrediction``),
served with our attention backends swapped in per request (:mod:`.bridge`).

transformers is imported only when such a folder loads (``pip install 'attnserve[transformers]'``).
"""

from models.hf_forecast.folder import FolderError, is_forecast_folder

__all__ = ["FolderError", "is_forecast_folder"]
