"""Below the routes: the engine (one call per route, requests validated into typed jobs), the
model registry and loaders, ``auto`` attention, the batching workers and the servable models.
Imports nothing from :mod:`service.http` or :mod:`service.runtime`."""
