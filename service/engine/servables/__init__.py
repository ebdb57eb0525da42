"""Adapters from ``models/`` objects to what the batcher and routes need (``base.ServedModel``)."""
