"""Code-mode programs in a fresh interpreter under the real bwrap, their tools brokered by the parent."""

from __future__ import annotations

import os
import time

import pytest

from lg_core.code_mode import SessionStateError
from lg_core.errors import CancelledError
from tests.code_mode.conftest import TOOL_SECONDS
from tests.sandbox.conftest import requires_bwrap

pytestmark = requires_bwrap


def test_a_program_composes_tools_in_parallel_and_keeps_their_order(make_session):
    session = make_session()
    started = time.monotonic()
    result = session.execute(
        "results = tools.parallel(\n"
        "    lambda: tools.help_center_lookup(query='refund policy'),\n"
        "    lambda: tools.help_center_lookup(query='shipping policy'),\n"
        ")\n"
        "text('\\n'.join(results))\n"
        "[entry['name'] for entry in ALL_TOOLS]\n"
    )
    elapsed = time.monotonic() - started
    assert result.status == "completed", result.error
    assert result.output == "Refunds are available within 30 days.\nStandard shipping takes three to five days."
    assert result.value == ["help_center_lookup", "inventory-count"]
    assert elapsed < 2 * TOOL_SECONDS  # the two calls overlapped in the parent
    assert session.broker.calls == 2


def test_json_results_arrive_as_python_values_and_the_dynamic_form_takes_either_name(make_session):
    result = make_session().execute(
        "a = tools.call('inventory-count', {'sku': 'x1'})\n"
        "b = tools.call('tools.inventory_count', {'sku': 'x2'})\n"
        "finish([a['count'], b['sku']])\n"
        "raise AssertionError('finish ends the program')\n"
    )
    assert (result.status, result.value) == ("completed", [3, "x2"])


def test_a_program_that_outlives_exec_is_watched_by_wait(make_session):
    session = make_session(observation_seconds=0.5)
    first = session.execute("import time\nprint('started')\ntime.sleep(1.5)\nprint('done')\n42\n")
    assert first.status == "still_working"
    assert first.output == "started\n"
    assert session.active
    later = session.wait()
    while later.still_working:
        later = session.wait()
    assert (later.status, later.value, later.output) == ("completed", 42, "done\n")
    assert not session.active
    with pytest.raises(SessionStateError, match="nothing to wait for"):
        session.wait()


def test_stop_ends_a_running_program_and_a_fresh_exec_starts_clean(make_session):
    session = make_session(observation_seconds=0.3)
    first = session.execute("open('scratch.txt', 'w').write('x')\nprint('looping')\nwhile True:\n    pass\n")
    assert first.status == "still_working"
    stopped = session.stop()
    assert stopped.status == "terminated"
    assert not session.active
    with pytest.raises(SessionStateError, match="nothing to stop"):
        session.stop()
    # Each program gets a new interpreter and a new temporary workspace.
    again = session.execute("import os\n(os.path.exists('scratch.txt'), 'first' in globals())")
    while again.status == "still_working":  # a loaded machine may start the interpreter after the window
        again = session.wait()
    assert (again.status, again.value) == ("completed", [False, False])


def test_the_program_sees_neither_the_worker_environment_nor_an_api_key(make_session, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-very-secret")
    monkeypatch.setenv("LG_WORKER_SECRET", "worker-secret")
    result = make_session().execute(
        "import os\n"
        "seen = dict(os.environ)\n"
        "seen['self'] = open('/proc/self/environ', 'rb').read().decode(errors='replace')\n"
        "try:\n"
        f"    seen['parent'] = open('/proc/{os.getpid()}/environ', 'rb').read().decode(errors='replace')\n"
        "except OSError as error:\n"
        "    seen['parent'] = type(error).__name__\n"
        "seen\n"
    )
    assert result.status == "completed", result.error
    dumped = repr(result.value)
    assert "sk-ant-very-secret" not in dumped and "worker-secret" not in dumped
    assert "ANTHROPIC_API_KEY" not in result.value and "LG_WORKER_SECRET" not in result.value
    assert result.value["parent"] in ("FileNotFoundError", "PermissionError")  # another PID namespace


@pytest.mark.parametrize(
    "write, message",
    [
        ("os.write(1, b'\\xff\\xff\\xff\\xff')", "more than the limit"),
        ("os.write(1, struct.pack('>I', 5) + b'nope!')", "not UTF-8 JSON"),
        ("os.write(1, struct.pack('>I', 2) + b'[]')", "JSON object"),
        ("os.write(1, struct.pack('>I', 20) + b'{\"type\": \"launch\"}  ')", "unknown frame type 'launch'"),
    ],
)
def test_a_malformed_frame_ends_the_program_with_a_protocol_error(make_session, write, message):
    result = make_session().execute(f"import os, struct, time\n{write}\ntime.sleep(30)\n")
    assert result.status == "error"
    assert "broke the code-mode protocol" in result.error
    assert message in result.error


def test_invalid_arguments_and_tool_failures_raise_inside_the_program(make_session):
    result = make_session().execute(
        "caught = []\n"
        "for call in (lambda: tools.help_center_lookup(query=3),\n"
        "             lambda: tools.inventory_count(sku='missing'),\n"
        "             lambda: tools.inventory_count(sku='broken'),\n"
        "             lambda: tools.call('shell', {'command': ['id']})):\n"
        "    try:\n"
        "        call()\n"
        "    except ToolCallError as error:\n"
        "        caught.append(str(error))\n"
        "caught\n"
    )
    assert result.status == "completed", result.error
    invalid, failed, internal, unknown = result.value
    assert invalid == "Invalid input for tool 'help_center_lookup': query: 3 is not of type 'string'"
    assert failed == "no product 'missing'"
    assert "internal error (RuntimeError)" in internal and "hunter2" not in internal
    assert "no tool named 'shell'" in unknown


def test_an_unhandled_error_is_the_programs_error_with_its_traceback(make_session):
    result = make_session().execute("x = 1\ntools.inventory_count(sku='missing')\n")
    assert result.status == "error"
    assert 'File "<program>", line 2' in result.error
    assert "ToolCallError: no product 'missing'" in result.error


def test_output_past_its_limit_ends_the_program(make_session):
    result = make_session(output_bytes=1000).execute("for _ in range(100):\n    print('x' * 99)\n")
    assert result.status == "error"
    assert "output limit of 1000 bytes" in result.error
    assert len(result.output.encode()) <= 1000


def test_the_lifetime_ends_a_program_whether_or_not_anyone_waits(make_session):
    session = make_session(observation_seconds=0.2, wall_seconds=1)
    assert session.execute("import time\ntime.sleep(60)\n").status == "still_working"
    time.sleep(1.5)  # nobody observes; the program's pump stops it at its deadline
    result = session.wait()
    assert result.status == "error"
    assert "exceeded its lifetime of 1 seconds" in result.error


def test_tool_calls_past_the_programs_limit_are_refused_inside_it(make_session):
    result = make_session(tool_calls=2).execute(
        "results = []\n"
        "for sku in ('a', 'b', 'c'):\n"
        "    try:\n"
        "        results.append(tools.inventory_count(sku=sku)['sku'])\n"
        "    except ToolCallError as error:\n"
        "        results.append(str(error))\n"
        "results\n"
    )
    assert result.value == ["a", "b", "the program reached its limit of 2 tool calls"]


def test_source_and_program_count_limits(make_session):
    session = make_session(source_bytes=20, programs=1)
    too_long = session.execute("x = 1\n" * 10)
    assert too_long.status == "error" and "source limit of 20 bytes" in too_long.error
    assert session.execute("1 + 1").value == 2
    refused = session.execute("2")
    assert refused.status == "error" and "limit of 1 programs" in refused.error


def test_close_ends_the_interpreter_and_removes_its_temporary_workspace(make_session):
    session = make_session(observation_seconds=0.2)
    assert session.execute("import time\nopen('big.txt', 'w').write('x')\ntime.sleep(60)\n").still_working
    program = session._program
    tempdir, process = program._tempdir, program._process
    assert os.path.isdir(tempdir)
    session.close()
    assert not os.path.exists(tempdir)
    assert process.returncode is not None
    with pytest.raises(SessionStateError, match="closed"):
        session.execute("1")


class _CancelledAfter:
    """A context whose check() raises once ``seconds`` passed, like a cancelled run's."""

    def __init__(self, seconds):
        self._at = time.monotonic() + seconds

    def check(self):
        if time.monotonic() >= self._at:
            raise CancelledError("run cancelled")


def test_a_cancelled_context_ends_the_program_and_propagates(make_session):
    session = make_session(observation_seconds=30)
    with pytest.raises(CancelledError):
        session.execute("import time\ntime.sleep(60)\n", context=_CancelledAfter(0.5))
    assert not session.active


def test_a_run_level_stop_inside_a_brokered_call_ends_the_program_and_raises(make_session):
    from lg_core.code_mode import Broker, Session
    from lg_core.tool import Tool
    from lg_core.tool_registry import ToolRegistry
    from tests.code_mode.conftest import sandbox_factory

    class Cancelling(Tool):
        tool_name = "cancelling"
        description = "Stands for a tool whose run is cancelled while it works."
        input_schema = {"type": "object"}

        def call(self, input):
            raise CancelledError("run cancelled")

    registry = ToolRegistry([Cancelling()])
    with Session(Broker(registry), sandbox_factory) as session:
        with pytest.raises(CancelledError):
            session.execute("tools.cancelling()\n")
        assert not session.active
    registry.close()
