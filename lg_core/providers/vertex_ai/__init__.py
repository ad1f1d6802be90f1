"""The ``vertex_ai`` adapter: Gemini models on Google Vertex AI
(``POST /v1/projects/<project>/locations/<location>/publishers/google/models/<model>:streamGenerateContent?alt=sse``).

The request body, the stream parser and the error mapping are the ``gemini``
adapter's (:mod:`lg_core.providers.gemini`); this package holds what differs:

* ``_connection``: ``project``, ``location`` (and the regional URL it implies), and
  the access token sent as ``Authorization: Bearer`` (fixed, from an environment
  variable, or from the application's ``credential_resolver``).
* ``_provider``: the Provider that ties them together.
"""

from __future__ import annotations

from lg_core.providers.vertex_ai._connection import DEFAULT_API_VERSION, DEFAULT_LOCATION
from lg_core.providers.vertex_ai._provider import VertexAIProvider

__all__ = ["DEFAULT_API_VERSION", "DEFAULT_LOCATION", "VertexAIProvider"]
