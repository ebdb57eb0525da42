"""Memory and work of a text model's network, whichever kind it is: our own BERT-family encoder
(:mod:`models.text.network.memory`) or a transformers backbone (:mod:`models.hf_text.memory`, priced with
what its layers run: the requested backend, or exact attention where that has no form for them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.hf_text.config import BackboneConfig
from models.hf_text.memory import backbone_bytes, backbone_work
from models.informer.model import LayerChoice
from models.text.network.memory import forward_bytes, forward_work


def backbone_choice(network: Any, backend: str, options: Mapping[str, Any] | None) -> LayerChoice:
    """What every layer of a transformers backbone runs for ``backend`` (its plan)."""
    given = {k: v for k, v in (options or {}).items() if v is not None}
    return network.plan(backend, given, network.layer_spec())


def network_bytes(
    network: Any,
    backend: str,
    options: Mapping[str, Any] | None,
    rows: int,
    length: int,
    itemsize: int,
    device_type: str,
) -> int:
    """Peak activation bytes of ``network`` on ``rows`` texts padded to ``length`` tokens."""
    config = network.config
    if isinstance(config, BackboneConfig):
        choice = backbone_choice(network, backend, options)
        return backbone_bytes(config, choice, rows, length, itemsize, device_type)
    return forward_bytes(config, backend, options, rows, length, itemsize, device_type)


def network_work(
    network: Any, backend: str, options: Mapping[str, Any] | None, rows: int, length: int
) -> float:
    """Flop-equivalents of ``network`` on ``rows`` texts padded to ``length`` tokens."""
    config = network.config
    if isinstance(config, BackboneConfig):
        return backbone_work(config, backbone_choice(network, backend, options), rows, length)
    return forward_work(config, backend, options, rows, length)
