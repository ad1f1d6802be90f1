"""Code mode: the model writes one Python program that composes the agent's tools.

The program runs in a fresh interpreter inside the run's sandbox backend, over a
temporary workspace of its own; every tool call it makes crosses a bounded
length-prefixed JSON protocol back to the Broker in the worker, which runs it
through the normal tool path. The interpreter holds no credentials and none of
the worker's environment.

    catalog.py         Catalog: tool specifications as Python function signatures for the model
    instructions.py    the model-facing usage notes and catalog
    protocol.py        length-prefixed JSON frames, bounded before they are parsed
    broker.py          Broker: the parent-side end of every tool call a program makes
    session.py         Session: exec, wait and stop of one active program; limits and lifetime
    program_result.py  ProgramResult: one observation of a program
    options.py         CodeModeOptions: an Agent's checked ``code_mode`` declaration; which tools move into programs
    controls.py        the model-facing controls exec, wait and stop
    relay.py           Relay: hands a program's calls to the step observing it
    active_sessions.py the sessions of this process between steps, and a worker's own queue for them
    _program.py        one running program: workspace, sandbox, interpreter, frame pump
    _runtime.py        the in-sandbox runtime (standard library only): tools, ALL_TOOLS, text, finish
"""

from lg_core.code_mode.broker import Broker, CallResult
from lg_core.code_mode.catalog import Catalog, Definition
from lg_core.code_mode.instructions import instructions
from lg_core.code_mode.program_result import ProgramResult
from lg_core.code_mode.protocol import ProtocolError
from lg_core.code_mode.session import DEFAULT_LIMITS, OBSERVATION_SECONDS, Session, SessionStateError

__all__ = [
    "DEFAULT_LIMITS",
    "OBSERVATION_SECONDS",
    "Broker",
    "CallResult",
    "Catalog",
    "Definition",
    "ProgramResult",
    "ProtocolError",
    "Session",
    "SessionStateError",
    "instructions",
]
