"""attnserve models: attention backends, the Informer forecaster and the MiniLM sentence encoder.

Nothing here imports from ``service``: models, training and evaluation run without a server.
"""
