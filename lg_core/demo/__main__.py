"""``python -m lg_core.demo``: the same as ``lg demo``."""

from lg_core.cli_output import output_console
from lg_core.demo.walkthrough import run_demo

raise SystemExit(run_demo(output_console(piped_width=100)))
