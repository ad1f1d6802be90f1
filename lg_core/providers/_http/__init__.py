"""What every HTTP streaming adapter shares, so each adapter module holds only its wire API.

Ownership, one concern per module:

* ``connection``: checked connection options (API key, base URL, timeouts, headers,
  transport, capabilities) and the httpx client they build. An adapter subclasses
  :class:`~lg_core.providers._http.connection.ConnectionOptions` for its own options
  and authentication headers.
* ``errors``: the failures every endpoint can cause (no response, a timeout, an
  unreadable header value) and the parts of an error reply all adapters read the
  same way (``Retry-After``, the status phrase, redaction of the API key).
  It also reads the first layer of an error body (its JSON, its ``error`` member).
* ``interrupt``: ending a cancelled or overdue run's waits at once.
* ``redaction``: the connection's secrets (key, header values, the base URL's userinfo
  and query values), cleaned from every error that leaves the adapter and from the
  HTTP stack's log records.
* ``request``: what request builders share: settings that may not replace a body key,
  the system prompt of a two-role API, joined turns, the tool a ``tool_choice`` names.
* ``stream``: what stream readers share: an event's data as a JSON object, token counts.
* ``provider``: :class:`~lg_core.providers._http.provider.StreamingProvider`, the
  request-and-stream flow: an adapter supplies the body, the path, the stream
  reader and the error mapping.
"""
