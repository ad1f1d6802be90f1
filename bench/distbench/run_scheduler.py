"""``Scheduler(local_liveness=False).run_forever``: the recovery loop as seen from another host.

    python bench/distbench/run_scheduler.py --interval 1 --no-local-liveness

``lg scheduler`` always treats a vanished holder process on its own host as
dead at once; a scheduler on another host cannot, and waits for the holder's
lease to expire. The benchmark runs everything on one host, so it measures the
lease-expiry path with this process. Settings come from the environment
(LG_RUN_STORE, LG_BROKER_URL, LG_IMPORTS, LG_LEASE_SECONDS); SIGTERM stops it
after the current pass.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from lg_core.config import current_configuration
from lg_scheduler.scheduler import Scheduler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--no-local-liveness", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s: %(levelname)s/%(name)s] %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler = Scheduler(current_configuration().runtime(), local_liveness=not args.no_local_liveness)
    print("scheduler ready", flush=True)
    scheduler.run_forever(interval=args.interval, stop=stop)


if __name__ == "__main__":
    main()
