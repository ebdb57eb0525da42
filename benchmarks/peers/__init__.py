"""attnserve beside peer servers (LitServe, infinity-emb, a naive FastAPI app) around the same
all-MiniLM-L6-v2 weights, driven by one load generator: ``python -m benchmarks.peers.run``.

Kept import-light: the peer apps import this package from the peers' own virtualenv.
"""
