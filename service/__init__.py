"""attnserve's HTTP service: routes -> batcher -> servable models (see README.md).

``create_app`` builds the FastAPI app; ``attnserve serve`` / ``python -m service`` runs it.
"""

from service.allocator import bound_kernel_caches

# Before anything imports torch: oneDNN reads its cache sizes once (see service/allocator.py).
bound_kernel_caches()

__version__ = "0.1.0"

__all__ = ["__version__"]
