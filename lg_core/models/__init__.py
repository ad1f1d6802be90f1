"""Model requests, responses, capabilities and resolution."""

from lg_core.models.request import ModelCapabilities, ModelRequest, ModelResponse, ToolSpecification
from lg_core.models.resolver import Model, ModelResolver

__all__ = ["Model", "ModelCapabilities", "ModelRequest", "ModelResolver", "ModelResponse", "ToolSpecification"]
