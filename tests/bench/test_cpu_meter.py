"""bench/distbench's CpuMeter: a process tree's CPU includes members that exited meanwhile.

A worker with more threads than its connection pool keeps opens and closes
PostgreSQL connections; the backends that closed during a measurement took
their CPU time with them, and the benchmark read a fraction of PostgreSQL's
real cost per run (and so a CPU-bound ceiling too high).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from distbench.probes import CpuMeter  # noqa: E402

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.3:\n    pass\n"
PARENT = (
    "import subprocess, sys\n"
    "sys.stdin.readline()\n"
    f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True)\n"  # a child that burns CPU, exits, is reaped
    "print('done', flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_a_tree_keeps_the_cpu_of_a_child_that_exited_during_the_measurement() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert parent.stdin is not None and parent.stdout is not None
    try:
        meter = CpuMeter({"tree": parent.pid}).start()
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline().strip() == "done"
        used = meter.stop()["tree"]
    finally:
        parent.stdin.write("stop\n")
        parent.stdin.flush()
        parent.wait(timeout=30)

    assert used >= 0.25, f"the exited child's 0.3 s of CPU is missing: {used:.2f} s"
