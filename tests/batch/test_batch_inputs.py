"""Bad input files and bad arguments: clear errors, and nothing submitted."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from lg_core import Agent, ConfigurationError, InvocationError, RunStateError, current_runtime
from lg_core.lease_holders import hostname
from lg_core.store.records import RUN_TERMINAL
from lg_scheduler.batch import submit_batch
from lg_scheduler.batch_inputs import BatchInputError, read_inputs
from tests.batch.batch_app import ItemAgent, LogItemTool, PlainTool, logged_items
from tests.batch.conftest import RawLine, read_results

BAD_LINES = [
    "a good line",  # 1
    RawLine('{"message": "unterminated'),  # 2 bad JSON
    {"context": {"a": 1}},  # 3 no message
    {"message": "x", "context": "not a mapping"},  # 4 bad field
    {"message": "x", "mesage": "typo"},  # 5 unknown field
    [1, 2],  # 6 not a string or object
    {"message": "   "},  # 7 blank message
    RawLine(""),  # 8 blank line: skipped
    {"message": "first", "id": "dup"},  # 9
    {"message": "second", "id": "dup"},  # 10 duplicate id
    {"message": "x", "run_id": "mine"},  # 11 run ids are derived
    {"message": "x", "deadline": -5},  # 12 negative deadline
    {"message": "x", "id": True},  # 13 bad id
    {"message": "x", "metadata": {"connection": "nowhere"}},  # 14 unknown provider connection
    "another good line",  # 15
]
EXPECTED = {
    2: "not valid JSON",
    3: 'missing "message"',
    4: "context must be a mapping",
    5: "unknown field 'mesage'",
    6: "got an array",
    7: "message must not be blank",
    10: "id 'dup' is already used by line 9",
    11: '"run_id" is not allowed',
    12: "deadline must be a non-negative number",
    13: "id must be a non-empty string",
    14: "cannot resolve the agent's model",
}


def assert_nothing_submitted(batch_env, out=None) -> None:
    store = current_runtime().store
    assert store.list_runs() == [] and store.list_batches() == []
    assert logged_items(batch_env) == []
    assert out is None or not out.exists()


def test_invalid_lines_are_reported_with_line_numbers_and_nothing_starts(file_config, inputs, batch_env, tmp_path):
    out = tmp_path / "results.jsonl"
    with pytest.raises(BatchInputError) as caught:
        submit_batch(ItemAgent, inputs(BAD_LINES), concurrency=4, out=out, progress=False)

    problems = {p.line: p.message for p in caught.value.problems}
    assert set(problems) == set(EXPECTED)
    for line, fragment in EXPECTED.items():
        assert fragment in problems[line], (line, problems[line])
    assert "11 invalid lines; nothing was submitted" in str(caught.value)
    assert "line 2: not valid JSON" in str(caught.value)
    assert_nothing_submitted(batch_env, out)


def test_skip_invalid_runs_the_rest_and_reports_invalid_lines_as_results(file_config, inputs, batch_env, tmp_path):
    out = tmp_path / "results.jsonl"
    report = submit_batch(ItemAgent, inputs(BAD_LINES), concurrency=4, out=out, progress=False, skip_invalid=True)

    assert (report.total, report.completed, report.invalid, report.failed) == (14, 3, 11, 0)
    assert not report.ok
    results = {r["line"]: r for r in read_results(out)}
    assert set(results) == set(range(1, 16)) - {8}
    for line, fragment in EXPECTED.items():
        assert results[line]["outcome"] == "invalid" and results[line]["run_id"] is None
        assert fragment in results[line]["error"]["message"]
    assert results[5]["error"]["class"] == "InvocationError"
    assert results[9]["outcome"] == "completed" and results[10]["id"] == "dup"
    assert sorted(logged_items(batch_env)) == ["a good line", "another good line", "first"]
    assert current_runtime().store.load_batch(report.batch_id).invalid == 11


def test_a_line_without_an_id_goes_by_its_line_number_and_a_clash_says_so(file_config, inputs, batch_env):
    """A line's own mistake comes first, and a clash with a line-number id names it as one."""
    path = inputs(
        [
            "first",  # 1: its id is 1
            {"message": "second", "id": 1},  # 2: clashes with line 1's line number
            {"message": "third", "id": 4},  # 3
            "fourth",  # 4: its line number clashes with line 3's id
            {"message": "fifth", "id": 6},  # 5
            {"mesage": "sixth"},  # 6: a typo (its line number clashes too)
        ]
    )
    with pytest.raises(BatchInputError) as caught:
        submit_batch(ItemAgent, path, concurrency=2, progress=False)

    problems = {p.line: p.message for p in caught.value.problems}
    assert set(problems) == {2, 4, 6}
    assert "id '1' is the id of line 1, which has no \"id\"" in problems[2]
    assert 'this line has no "id", so its id is its line number, 4, which line 3 already uses' in problems[4]
    assert "unknown field 'mesage'" in problems[6]
    assert_nothing_submitted(batch_env)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(None, "does not exist"), ("dir", "is a directory"), ("\n  \n\n", "has no inputs")],
)
def test_unusable_input_files(file_config, tmp_path, batch_env, content, fragment):
    path = tmp_path / "inputs.jsonl"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    with pytest.raises(InvocationError, match=fragment):
        submit_batch(ItemAgent, path, concurrency=2, progress=False)
    assert_nothing_submitted(batch_env)


@pytest.mark.parametrize("concurrency", [0, -3, True, "5", 2.5, 10_001])
def test_concurrency_must_be_a_positive_integer(file_config, inputs, batch_env, concurrency):
    with pytest.raises(InvocationError, match="concurrency must be an integer from 1"):
        submit_batch(ItemAgent, inputs(["x"]), concurrency=concurrency, progress=False)
    assert_nothing_submitted(batch_env)


@pytest.mark.parametrize("limit", ["10", "ten/s", "10/ms", "10/day", "0/s", "-1/s", "10/m", "", 10])
def test_rate_limit_syntax(file_config, inputs, batch_env, limit):
    with pytest.raises(InvocationError, match="rate limit"):
        submit_batch(ItemAgent, inputs(["x"]), concurrency=1, rate_limit=limit, progress=False)
    assert_nothing_submitted(batch_env)


@pytest.mark.parametrize("agent", [str, Agent, PlainTool, ItemAgent(), "tests.batch.batch_app:ItemAgent"])
def test_the_agent_must_be_an_agent_subclass(file_config, inputs, batch_env, agent):
    with pytest.raises(InvocationError, match="a batch runs an Agent subclass"):
        submit_batch(agent, inputs(["x"]), concurrency=1, progress=False)
    assert_nothing_submitted(batch_env)


def test_output_paths_that_cannot_be_written(file_config, inputs, batch_env, tmp_path):
    path = inputs(["x"])
    with pytest.raises(InvocationError, match="the directory .* does not exist"):
        submit_batch(ItemAgent, path, concurrency=1, out=tmp_path / "missing" / "results.jsonl", progress=False)
    with pytest.raises(InvocationError, match="is a directory"):
        submit_batch(ItemAgent, path, concurrency=1, out=tmp_path, progress=False)
    assert_nothing_submitted(batch_env)


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"inputs_path": None}, "inputs_path must be the path of a JSONL file .* got NoneType"),
        ({"inputs_path": 5}, "inputs_path must be the path of a JSONL file .* got int"),
        ({"out": 5}, "out must be the path of the results file .* got int"),
        ({"on_start": 5}, "on_start must be None or a function .* got int"),
        ({"on_start": lambda report: None, "progress": "no"}, "progress must be True or False"),
        ({"force": 1}, "force must be True or False"),
        ({"skip_invalid": None}, "skip_invalid must be True or False"),
        ({"keep_results": "yes"}, "keep_results must be True, False or None"),
    ],
)
def test_arguments_of_the_wrong_type_are_refused_before_anything_is_written(
    file_config, inputs, batch_env, tmp_path, arguments, fragment
):
    arguments = {"inputs_path": inputs(["x"]), "progress": False, **arguments}
    with pytest.raises(InvocationError, match=fragment):
        submit_batch(ItemAgent, concurrency=1, **arguments)
    assert_nothing_submitted(batch_env)


def test_an_async_on_start_is_refused_before_anything_is_written(file_config, inputs, batch_env):
    async def on_start(report):
        pass

    with pytest.raises(InvocationError, match="on_start must be a plain function"):
        submit_batch(ItemAgent, inputs(["x"]), concurrency=1, progress=False, on_start=on_start)
    assert_nothing_submitted(batch_env)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_output_directory_without_write_permission(file_config, inputs, batch_env, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(InvocationError, match="not writable"):
        submit_batch(ItemAgent, inputs(["x"]), concurrency=1, out=locked / "results.jsonl", progress=False)
    assert_nothing_submitted(batch_env)


@pytest.mark.parametrize("batch_id", ["", "has space", "dots.not.allowed", "a:b", "-leading", "x" * 65])
def test_batch_ids_are_checked(file_config, inputs, batch_env, batch_id):
    with pytest.raises(InvocationError, match="batch id must be"):
        submit_batch(ItemAgent, inputs(["x"]), concurrency=1, batch_id=batch_id, progress=False)
    assert_nothing_submitted(batch_env)


def test_a_batch_id_cannot_be_reused_for_other_inputs(file_config, inputs):
    submit_batch(ItemAgent, inputs(["x"]), concurrency=1, batch_id="nightly", progress=False)
    with pytest.raises(InvocationError, match="batch nightly was submitted with a different input file"):
        submit_batch(ItemAgent, inputs(["y"], name="other.jsonl"), concurrency=1, batch_id="nightly", progress=False)
    assert [r.status in RUN_TERMINAL for r in current_runtime().store.list_runs()] == [True]


def holder_of(pid: int, start_time: str | None = None) -> str:
    """The holder string (see lg_core.lease_holders) of process ``pid`` on this host."""
    if start_time is None:
        start_time = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return f"{hostname()}:{pid}:{start_time}"


def open_batch_held_by(path: Path, batch_id: str, holder: str) -> None:
    current_runtime().store.open_batch(
        {
            "id": batch_id,
            "agent": "tests.batch.batch_app:ItemAgent",
            "input_path": str(path),
            "input_hash": hashlib.sha256(path.read_bytes()).hexdigest(),
            "total": 1,
            "holder": holder,
        }
    )


def test_a_live_submitter_is_not_joined_by_a_second_one(file_config, inputs):
    path = inputs(["x"])
    other = subprocess.Popen(["sleep", "60"])  # another process, alive, holds the batch
    try:
        holder = holder_of(other.pid)
        open_batch_held_by(path, "shared", holder)
        with pytest.raises(RunStateError, match=f"is being submitted by process {holder}, which looks alive"):
            submit_batch(ItemAgent, path, concurrency=1, batch_id="shared", progress=False)
        assert current_runtime().store.list_runs() == []
        assert (
            submit_batch(ItemAgent, path, concurrency=1, batch_id="shared", progress=False, force=True).completed == 1
        )
    finally:
        other.kill()
        other.wait()


def test_a_dead_submitter_is_taken_over(file_config, inputs):
    path = inputs(["x"])
    finished = subprocess.Popen(["true"])
    finished.wait()
    open_batch_held_by(path, "orphaned", holder_of(finished.pid, start_time="1"))
    assert submit_batch(ItemAgent, path, concurrency=1, batch_id="orphaned", progress=False).completed == 1


def test_an_unreachable_broker_is_reported_before_anything_starts(tmp_path, inputs, batch_env):
    from lg_core import Configuration, with_configuration
    from lg_scheduler.stack.servers import free_port

    config = Configuration(
        run_store=f"sqlite:///{tmp_path / 'runs.db'}", broker_url=f"redis://127.0.0.1:{free_port()}/0"
    )
    with with_configuration(config):
        with pytest.raises(ConfigurationError, match="cannot reach the broker"):
            submit_batch(ItemAgent, inputs(["x"]), concurrency=1, progress=False)
        assert_nothing_submitted(batch_env)
    config.close()


def test_a_line_with_a_lone_surrogate_is_invalid_before_anything_starts(file_config, inputs, batch_env):
    """JSON's \\ud800 escape decodes to a str no store or provider takes: the line is refused up front."""
    path = inputs([RawLine('"fine"'), RawLine('{"message": "bad \\ud800 text"}')])
    with pytest.raises(InvocationError, match=r"line 2: .*lone surrogate"):
        submit_batch(ItemAgent, path, concurrency=2, progress=False)
    assert_nothing_submitted(batch_env)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may read anything")
def test_an_input_file_without_read_permission(file_config, inputs, batch_env):
    path = inputs(["x"])
    path.chmod(0o200)
    with pytest.raises(InvocationError, match=f"cannot read input file {path}: Permission denied"):
        submit_batch(ItemAgent, path, concurrency=1, progress=False)
    assert_nothing_submitted(batch_env)


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs /proc/self/mem (opens, but fails to read)")
def test_an_input_file_that_fails_while_being_read(file_config, batch_env):
    with pytest.raises(InvocationError, match="cannot read input file /proc/self/mem: Input/output error"):
        submit_batch(ItemAgent, "/proc/self/mem", concurrency=1, progress=False)
    assert_nothing_submitted(batch_env)


def test_inputs_from_a_pipe_are_read_once_and_the_batch_runs(file_config, tmp_path, batch_env):
    """``lg batch submit agent <(generate)``: a pipe cannot be read twice, so it is copied as it is scanned."""
    fifo = tmp_path / "inputs.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f'printf \'"one"\\n"two"\\n{{"message": "three", "id": "c"}}\\n\' > {fifo}'])
    try:
        report = submit_batch(ItemAgent, fifo, concurrency=2, out=tmp_path / "results.jsonl", progress=False)
    finally:
        writer.wait(timeout=60)

    assert report.ok and report.completed == 3
    assert sorted(r["id"] for r in read_results(tmp_path / "results.jsonl")) == ["1", "2", "c"]
    assert sorted(logged_items(batch_env)) == ["one", "three", "two"]


def test_an_input_file_edited_while_the_batch_runs_stops_it_and_a_resubmit_of_the_original_resumes(
    file_config, inputs, batch_env, tmp_path
):
    """Items are read back from the file as they start: one changed in place is not silently run."""
    path = inputs([f"item {n}" for n in range(1, 6)])
    original = path.read_bytes()
    out = tmp_path / "results.jsonl"

    def append_a_line(report) -> None:
        with path.open("a") as handle:
            handle.write('"item 6"\n')

    with pytest.raises(InvocationError, match=f"input file {path} was changed while the batch ran; the batch stopped"):
        submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False, on_start=append_a_line)
    assert logged_items(batch_env) == []
    record = current_runtime().store.list_batches()[0]
    assert record.holder is None and record.status == "running"  # released: a resubmit may take it

    path.write_bytes(original)
    report = submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False)
    assert report.ok and report.completed == 5 and report.batch_id == record.id


def test_an_input_file_replaced_while_the_batch_runs_does_not_change_it(file_config, inputs, batch_env, tmp_path):
    """An editor saving by writing a new file and renaming it over the old: the open file is the batch's."""
    path = inputs([f"item {n}" for n in range(1, 6)])

    def replace(report) -> None:
        other = tmp_path / "new.jsonl"
        other.write_text('"something else"\n')
        other.replace(path)

    report = submit_batch(ItemAgent, path, concurrency=2, progress=False, on_start=replace)

    assert report.ok and report.completed == 5
    assert sorted(logged_items(batch_env)) == [f"item {n}" for n in range(1, 6)]


def test_resuming_a_batch_that_skipped_invalid_lines_without_skip_invalid_says_to_pass_it(
    file_config, inputs, batch_env
):
    """Fixing the lines would make a new file, so a new batch that runs every item again: the error says so."""
    path = inputs(["fine", RawLine("{nope"), "also fine"])
    first = submit_batch(ItemAgent, path, concurrency=2, progress=False, skip_invalid=True)
    calls = logged_items(batch_env)

    with pytest.raises(BatchInputError) as caught:
        submit_batch(ItemAgent, path, concurrency=2, progress=False)

    assert caught.value.batch_id == first.batch_id
    message = str(caught.value)
    assert f"which batch {first.batch_id} skipped when it was submitted with --skip-invalid" in message
    assert "pass that again to resume it" in message and "a fixed file would be a new batch" in message
    assert "line 2: not valid JSON" in message
    assert logged_items(batch_env) == calls

    with pytest.raises(BatchInputError) as fresh:  # another file: a new batch, the usual advice
        submit_batch(ItemAgent, inputs(["x", RawLine("{")], name="other.jsonl"), concurrency=2, progress=False)
    assert fresh.value.batch_id is None and "nothing was submitted (fix them" in str(fresh.value)


def test_a_byte_order_mark_starting_a_line_is_not_an_error(file_config, tmp_path, batch_env):
    """Files saved by Windows tools start with one; files concatenated with ``cat`` carry it to a later line."""
    path = tmp_path / "inputs.jsonl"
    bom = "\ufeff".encode()
    path.write_bytes(bom + b'"first"\n"second"\n' + bom + b'{"message": "third", "id": "t"}\n')

    report = submit_batch(ItemAgent, path, concurrency=2, progress=False)

    assert report.ok and report.completed == 3
    assert sorted(logged_items(batch_env)) == ["first", "second", "third"]


def test_read_inputs_reports_its_progress_every_thousand_lines(file_config, tmp_path):
    path = tmp_path / "inputs.jsonl"
    path.write_text("".join(f'"item {n}"\n' for n in range(2500)))
    calls = []

    with read_inputs(
        path, ItemAgent, current_runtime().resolver, on_progress=lambda *call: calls.append(call)
    ) as scanned:
        assert scanned.total == 2500

    size = path.stat().st_size
    assert [lines for _size, _read, lines in calls] == [1000, 2000, 2500]
    assert {call[0] for call in calls} == {size} and calls[-1][1] == size
    assert 0 < calls[0][1] < calls[1][1] < size


def test_an_input_file_only_touched_while_the_batch_runs_does_not_stop_it(file_config, inputs, batch_env):
    """A new modification time with the same content (touch, a backup tool) is not an edit."""
    path = inputs([f"item {n}" for n in range(1, 6)])

    def touch(report) -> None:
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))

    report = submit_batch(ItemAgent, path, concurrency=2, progress=False, on_start=touch)

    assert report.ok and report.completed == 5
    assert sorted(logged_items(batch_env)) == [f"item {n}" for n in range(1, 6)]


def test_a_same_size_edit_in_place_while_the_batch_runs_stops_it_before_the_edited_line_runs(
    file_config, inputs, batch_env, monkeypatch
):
    """Size and modification time only say to look again: the file's bytes on disk now decide, not a read buffer."""
    path = inputs([f"item {n}" for n in range(1, 6)])
    original = path.read_bytes()
    stat = path.stat()  # written a while ago: a coarse file clock cannot hide the edit below
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - 5_000_000_000))
    log_item = LogItemTool.call

    def log_then_edit(tool, input):  # while item 1 runs, before item 2 is read: "item 4" becomes "edit 4"
        result = log_item(tool, input)
        if input["item"] == "item 1":
            with path.open("r+b") as handle:
                handle.seek(original.index(b'"item 4"'))
                handle.write(b'"edit 4"')
        return result

    monkeypatch.setattr(LogItemTool, "call", log_then_edit)
    with pytest.raises(InvocationError, match=f"input file {path} was changed while the batch ran; the batch stopped"):
        submit_batch(ItemAgent, path, concurrency=1, progress=False)
    assert logged_items(batch_env) == ["item 1"]

    path.write_bytes(original)  # restored: a resubmit runs the rest, item 1 not again
    report = submit_batch(ItemAgent, path, concurrency=1, progress=False)
    assert report.ok and report.completed == 5 and report.already_finished == 1
    assert logged_items(batch_env) == [f"item {n}" for n in range(1, 6)]
