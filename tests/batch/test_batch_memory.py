"""A batch's memory is bounded by its concurrency, not by the size of its input file.

Each item carries 500 kB of metadata, so the input file is 20 MB: code that held
every item, or every result, would peak at several times that (it did: about
60 MB). Reading items back from the file as they start, and writing results
only to ``out``, keeps the peak to a few in-flight runs. The bounds are
fractions of the file's size, so they do not depend on how fast runs finish.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from lg_core import current_runtime
from lg_scheduler.batch import submit_batch
from lg_scheduler.batch_inputs import READ_BUFFER, read_inputs
from tests.batch.batch_app import ItemAgent
from tests.batch.conftest import read_results

ITEMS = 40
PAD = 500_000


@pytest.fixture
def big_inputs(tmp_path):
    path = tmp_path / "big.jsonl"
    with path.open("w") as handle:
        for n in range(1, ITEMS + 1):
            handle.write(json.dumps({"message": f"item {n}", "metadata": {"pad": f"{n}" + "x" * PAD}}) + "\n")
    return path


@contextmanager
def traced() -> Iterator[dict[str, int]]:
    """The peak of memory allocated inside the block (tracemalloc), in ``["peak"]`` afterwards."""
    measured: dict[str, int] = {}
    tracemalloc.start()
    try:
        yield measured
        measured["peak"] = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def warm_up(inputs, tmp_path) -> None:
    """One small batch first: imports, the store's schema and caches are not what is measured."""
    submit_batch(
        ItemAgent,
        inputs(["warm up"], name="warm.jsonl"),
        concurrency=1,
        out=tmp_path / "warm-results.jsonl",
        progress=False,
    )


def test_reading_the_inputs_keeps_ids_not_text(file_config, inputs, big_inputs, tmp_path):
    warm_up(inputs, tmp_path)
    size, resolver = big_inputs.stat().st_size, current_runtime().resolver
    with traced() as memory:
        with read_inputs(big_inputs, ItemAgent, resolver) as scanned:
            keys = list(scanned.keys())
            last = scanned.item(ITEMS - 1)
            total = scanned.total

    assert [key.id for key in keys] == [str(n) for n in range(1, ITEMS + 1)] and total == ITEMS
    assert last.options["metadata"]["pad"].startswith(f"{ITEMS}x") and last.line == ITEMS
    assert memory["peak"] < size / 4, (memory["peak"], size)  # a few copies of the line being checked


def test_a_batch_writing_to_out_holds_neither_its_inputs_nor_its_results(file_config, inputs, big_inputs, tmp_path):
    warm_up(inputs, tmp_path)
    out = tmp_path / "results.jsonl"
    size = big_inputs.stat().st_size

    with traced() as memory:
        report = submit_batch(ItemAgent, big_inputs, concurrency=2, out=out, progress=False)

    assert report.ok and report.completed == ITEMS
    assert report.results == []  # the file is the record
    assert sorted(r["line"] for r in read_results(out)) == list(range(1, ITEMS + 1))
    assert memory["peak"] < size / 2, (memory["peak"], size)

    with traced() as memory:  # a resubmit writes every result from the store, and runs nothing
        again = submit_batch(ItemAgent, big_inputs, concurrency=2, out=out, progress=False)

    assert (again.already_finished, again.started, again.results) == (ITEMS, 0, [])
    assert sorted(r["line"] for r in read_results(out)) == list(range(1, ITEMS + 1))
    assert memory["peak"] < size / 4, (memory["peak"], size)


def test_results_are_kept_without_out_or_when_asked(file_config, inputs, tmp_path):
    path = inputs(["a", "b"])
    assert sorted(r["id"] for r in submit_batch(ItemAgent, path, concurrency=2, progress=False).results) == ["1", "2"]

    out = tmp_path / "results.jsonl"
    kept = submit_batch(ItemAgent, path, concurrency=2, out=out, progress=False, keep_results=True)
    assert sorted(r["id"] for r in kept.results) == ["1", "2"] and len(read_results(out)) == 2
    assert submit_batch(ItemAgent, path, concurrency=2, progress=False, keep_results=False).results == []


def test_checking_ids_for_duplicates_holds_a_bit_per_line_without_an_id(file_config, inputs, tmp_path):
    """10,000 lines without "id": their ids are their line numbers, one bit each, not 10,000 strings."""
    warm_up(inputs, tmp_path)
    path = tmp_path / "many.jsonl"
    path.write_text("".join(f'"{n}"\n' for n in range(10_000)))
    resolver = current_runtime().resolver

    with traced() as memory:
        read_inputs(path, ItemAgent, resolver).close()

    # The read buffer, 12 bytes a line for where it starts, one bit for its id: a dict entry per id was about 190 bytes.
    assert memory["peak"] < READ_BUFFER + 10_000 * 30, memory["peak"]


def test_id_claims_agree_with_a_dict_of_every_id():
    """Named ids, line numbers, and clashes between them, in every order: as ``dict.setdefault`` would say."""
    import random

    from lg_scheduler.batch_lines import IdClaims as _IdClaims

    rng = random.Random(7)
    for _ in range(200):
        claims, reference = _IdClaims(), {}
        for number in range(1, 40):
            named = rng.random() < 0.5
            item_id = rng.choice([str(rng.randint(1, 45)), f"0{rng.randint(1, 9)}", "x", "١"]) if named else str(number)
            assert claims.claim(item_id, number, named) == reference.setdefault(item_id, (number, named)), (
                number,
                item_id,
            )
