"""Models: what the engine asks a provider and what comes back, and which model a run uses.

* ``request`` - ``ModelRequest``, ``ModelResponse``, ``ModelCapabilities``, ``ToolSpecification``
* ``resolver`` - ``ModelResolver``: roles (``models`` settings), targets (``connection:model``) and
  provider connections resolved to a ``Model``, whose adapter ``lg_core.providers`` imports on first use
"""

from lg_core.models.request import ModelCapabilities, ModelRequest, ModelResponse, ToolSpecification
from lg_core.models.resolver import Model, ModelResolver

__all__ = ["Model", "ModelCapabilities", "ModelRequest", "ModelResolver", "ModelResponse", "ToolSpecification"]
