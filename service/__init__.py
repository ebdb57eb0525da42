"""attnserve's HTTP service: routes -> batcher -> servable models (see README.md).

``create_app`` builds the FastAPI app; ``attnserve serve`` / ``python -m service`` runs it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
