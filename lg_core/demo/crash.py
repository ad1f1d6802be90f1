"""The demo's doomed child process: start a durable run, SIGKILL ourselves mid-run.

    python -m lg_core.demo.crash --store sqlite:///runs.db --journal calls.log --run-id ID

It streams :class:`~lg_core.demo.support.DurableSupportAgent` on the given
store, printing its tool calls; the help-center tool kills this process with
SIGKILL while looking up ``--crash-on`` (after the earlier lookups committed).
The run stays ``running`` in the store, for ``lg_core.resume`` to finish.
"""

from __future__ import annotations

import argparse
import os

from lg_core.cli_output import EventPrinter, output_console
from lg_core.config import build_configuration, with_configuration
from lg_core.demo import support

QUESTION = "My blender stopped working 40 days after delivery. Can I get a refund?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lg_core.demo.crash", description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="run store URL (a SQLite file)")
    parser.add_argument("--journal", required=True, help="file the tool appends each call to")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--crash-on", default=support.DURABLE_TOPICS[-1], choices=support.DURABLE_TOPICS)
    args = parser.parse_args(argv)

    console = output_console()
    support.arm_crash(args.crash_on)
    config = build_configuration(run_store=args.store)
    console.print(
        f"child pid {os.getpid()} starts run {args.run_id}; it will SIGKILL itself looking up {args.crash_on!r}"
    )
    try:
        with with_configuration(config):
            # on_event runs on the thread executing the step, so every line is out before the kill
            printer = EventPrinter(console)
            context = {"journal": args.journal}
            run = support.DurableSupportAgent.ask(QUESTION, run_id=args.run_id, context=context, on_event=printer)
            printer.finish()
    finally:
        config.close()
    console.print(f"the run ended without a crash: {run.outcome}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
