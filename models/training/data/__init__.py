"""Time-series data for training and evaluation: CSV reading, tables, splits and provenance."""
