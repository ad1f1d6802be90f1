"""Opening a store logs a schema change, not Alembic's set-up lines (every process opens one)."""

from __future__ import annotations

import subprocess
import sys

OPEN_TWICE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from lg_core import configure, current_runtime
configure(run_store=sys.argv[1]); current_runtime()
"""


def test_a_store_opened_at_info_level_logs_its_stamp_and_no_alembic_set_up(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    first = subprocess.run([sys.executable, "-c", OPEN_TWICE, url], capture_output=True, text=True, timeout=60)
    again = subprocess.run([sys.executable, "-c", OPEN_TWICE, url], capture_output=True, text=True, timeout=60)

    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert "Running stamp_revision" in first.stderr, "creating the schema is news"
    for chatter in ("setup plugin", "Context impl", "Will assume"):
        assert chatter not in first.stderr + again.stderr
    assert "alembic" not in again.stderr, "opening an up-to-date store logs nothing of Alembic's"
