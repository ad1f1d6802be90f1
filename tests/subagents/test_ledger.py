"""The manager's ledger: identities, FIFO turns, the concurrency bound and every limit as a ToolError."""

import json

import pytest

from lg_core.errors import ToolError
from lg_core.subagents.ledger import TRUNCATION_NOTE, Ledger
from lg_core.subagents.limits import ManagerLimits


def ledger(**limits):
    return Ledger(ManagerLimits(**limits))


def test_a_ledger_of_a_subagent_places_its_children_beneath_the_subagents_path():
    book = Ledger(ManagerLimits(), "/root/alpha")
    assert book.spawn("research", "x", "task", "c-x").subagent_id == "/root/alpha/x"


def test_a_spawned_identity_lives_beneath_the_parent_with_its_task_queued():
    book = ledger()
    identity = book.spawn("research", "review_api", "Check the API", "conv-1")
    assert identity.subagent_id == "/root/review_api"
    assert identity.status == "working"
    assert [(t.number, t.message, t.status) for t in identity.turns] == [(1, "Check the API", "queued")]


def test_turns_start_oldest_first_one_per_identity_within_the_concurrency_bound():
    book = ledger(max_concurrent=2)
    book.spawn("research", "a", "first a", "c-a")
    book.spawn("research", "b", "first b", "c-b")
    book.spawn("research", "c", "first c", "c-c")
    book.send("/root/a", "second a")
    started = book.turns_to_start()
    assert [(i.subagent_id, t.message) for i, t in started] == [("/root/a", "first a"), ("/root/b", "first b")]
    assert book.turns_to_start() == []  # both slots taken
    book.turn_ended("/root/a", 1, "completed", "a says hi")
    # /root/c's turn was queued before a's follow-up: it goes first
    assert [(i.subagent_id, t.message) for i, t in book.turns_to_start()] == [("/root/c", "first c")]
    book.turn_ended("/root/b", 1, "completed", "b says hi")
    assert [(i.subagent_id, t.message) for i, t in book.turns_to_start()] == [("/root/a", "second a")]


def test_a_completed_turn_records_its_answer_and_a_failed_one_only_its_error():
    book = ledger()
    book.spawn("research", "a", "task", "c-a")
    book.turns_to_start()
    book.turn_ended("/root/a", 1, "completed", "the answer")
    book.send("/root/a", "again")
    book.turns_to_start()
    book.turn_ended("/root/a", 2, "failed", "HTTPError: the model provider returned an error.")
    view = book.snapshot(book.identity("/root/a"))
    assert view == {
        "subagent_id": "/root/a",
        "kind": "research",
        "status": "failed",
        "completed_turns": 1,
        "queued_turns": 0,
        "response": "the answer",
        "error": "HTTPError: the model provider returned an error.",
    }


def test_recording_a_turns_end_twice_changes_nothing():
    book = ledger()
    book.spawn("research", "a", "task", "c-a")
    book.turns_to_start()
    book.turn_ended("/root/a", 1, "completed", "one")
    book.turn_ended("/root/a", 1, "completed", "one again")
    assert book.identity("/root/a").completed_turns == 1
    assert book.identity("/root/a").last_response == "one"


def test_a_long_answer_is_cut_to_the_response_limit_saying_so():
    book = ledger(max_response_chars=10)
    book.spawn("research", "a", "task", "c-a")
    book.turns_to_start()
    book.turn_ended("/root/a", 1, "completed", "x" * 50)
    assert book.identity("/root/a").last_response == "x" * 10 + TRUNCATION_NOTE.format(limit=10)


def test_a_wait_returns_at_once_on_unseen_progress_or_when_nothing_works():
    book = ledger()
    assert book.progress(None) == (True, [])
    book.spawn("research", "a", "task", "c-a")
    book.turns_to_start()
    ready, selected = book.progress(["/root/a"])
    assert not ready and [i.subagent_id for i in selected] == ["/root/a"]
    book.turn_ended("/root/a", 1, "completed", "done")
    assert book.progress(None)[0]
    book.snapshot(book.identity("/root/a"))  # the parent has now seen it
    assert book.progress(None)[0]  # and nothing works any more


@pytest.mark.parametrize(
    ("limits", "calls", "problem"),
    [
        ({"max_identities": 1}, [("spawn", "b")], "already has 1 subagents, the most it may create"),
        ({"max_turns": 2}, [("send", "x"), ("send", "y")], "used its 2 subagent turns"),
        ({"max_queued_turns_per_identity": 1}, [("send", "x")], "already has 1 follow-ups queued"),
        ({"max_message_chars": 5}, [("send", "123456")], "6 characters; at most 5"),
        ({}, [("spawn", "a")], "a subagent named 'a' already exists"),
        ({}, [("send_to", "/root/zz")], "no subagent '/root/zz' in this run .known: /root/a."),
    ],
)
def test_each_bound_is_a_tool_error_the_model_reads_and_leaves_the_ledger_as_it_was(limits, calls, problem):
    book = ledger(**limits)
    book.spawn("research", "a", "task", "c-a")
    *before_calls, (verb, value) = calls
    for _verb, earlier in before_calls:
        book.send("/root/a", earlier)
    before = json.dumps(book.to_dict())
    with pytest.raises(ToolError, match=problem):
        if verb == "spawn":
            book.spawn("research", value, "task", "c-new")
        elif verb == "send":
            book.send("/root/a", value)
        else:
            book.send(value, "hello")
    assert json.dumps(book.to_dict()) == before


def test_a_bad_task_name_is_refused_before_anything_is_created():
    book = ledger()
    with pytest.raises(Exception, match="only lowercase letters"):
        book.spawn("research", "Bad Name", "task", "c")
    assert book.identities == {}


def test_listing_is_newest_first_by_kind_with_an_opaque_cursor():
    book = ledger()
    for name, kind in [("a", "research"), ("b", "review"), ("c", "research"), ("d", "research")]:
        book.spawn(kind, name, "task", f"c-{name}")
    page, cursor = book.listing("research", 2, None)
    assert [i.subagent_id for i in page] == ["/root/d", "/root/c"]
    page, cursor = book.listing("research", 2, cursor)
    assert ([i.subagent_id for i in page], cursor) == (["/root/a"], None)
    with pytest.raises(ToolError, match="is not one list_subagents returned"):
        book.listing(None, 2, "page-2")


def test_the_ledger_round_trips_through_json_and_a_copy_is_independent():
    book = ledger(max_concurrent=1)
    book.spawn("research", "a", "task", "c-a")
    book.send("/root/a", "follow-up")
    book.turns_to_start()
    book.waiters["root/turn-1/tool/w"] = (["/root/a"], 12.5)
    book.interjections["root/turn-1/tool/i"] = ("child-run", 3)  # a parked interject call's delivery
    restored = Ledger.from_dict(json.loads(json.dumps(book.to_dict())), book.limits)
    assert restored.to_dict() == book.to_dict()
    assert restored.interjections == {"root/turn-1/tool/i": ("child-run", 3)}
    copied = restored.copy()
    copied.turn_ended("/root/a", 1, "completed", "done")
    assert restored.identity("/root/a").completed_turns == 0


def _persisted(book, name, created_at):
    identity = book.spawn("research", name, f"{name}?", f"c-{name}", created_at)
    book.turns_to_start()
    book.turn_ended(identity.subagent_id, 1, "completed", f"{name} says hi", "run-1")
    return book.registry_entry(identity)


def test_restored_identities_are_listed_newest_first_dormant_and_outside_the_identity_bound():
    earlier = ledger()
    entries = [_persisted(earlier, "new", 2.0), _persisted(earlier, "old", 1.0)]  # a registry: newest first
    assert all(entry["history_run"] is None and entry["turns"] == [] for entry in entries)

    book = ledger(max_identities=1)
    book.restore(entries)
    page, _ = book.listing(None, 10, None)
    assert [(i.subagent_id, i.status, i.dormant) for i in page] == [
        ("/root/new", "completed", True),
        ("/root/old", "completed", True),
    ]
    assert book.progress(None) == (True, [])  # a wait for all watches this run's identities only
    book.spawn("research", "fresh", "fresh?", "c-fresh")  # dormant identities do not count
    with pytest.raises(ToolError, match="works with 1 subagents"):
        book.send("/root/old", "more?")
    assert book.identity("/root/old").dormant


def test_a_follow_up_wakes_a_restored_identity_and_numbers_its_turn_after_the_persisted_ones():
    earlier = ledger()
    book = ledger()
    book.restore([_persisted(earlier, "alpha", 1.0)])
    turn = book.send("/root/alpha", "more?")
    assert turn.number == 2 and not book.identity("/root/alpha").dormant
