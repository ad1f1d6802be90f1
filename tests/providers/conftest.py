"""Fixtures that run a test once per wire format, each against its own local replay server.

A module that asks for ``wire`` runs each test once per provider adapter; a module that
defines a ``server`` fixture of its own keeps it.
"""

import pytest

from tests.providers.wire_formats import FORMATS


def adapter_id(wire):
    return wire.adapter


@pytest.fixture(params=FORMATS, ids=adapter_id)
def wire(request):
    """The wire format under test (one parameter per provider adapter)."""
    return request.param


@pytest.fixture
def server(wire):
    """A local server replaying ``wire``'s documented streaming format."""
    yield from wire.serve()
