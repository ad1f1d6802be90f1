"""The scheduler process of the chaos tests: ``Scheduler.run_forever`` with a short interval.

    python tests/chaos/run_scheduler.py --interval 0.2 [--stall 600] [--no-local-liveness] [--clock-skew S]

The stall backstop defaults to 10 minutes so each chaos test proves the
mechanism it is about (relay, lease sweeper), not the backstop behind it.

Settings come from the environment like every other process (LG_RUN_STORE,
LG_BROKER_URL, LG_IMPORTS, LG_LEASE_SECONDS, LG_RELAY_GRACE). SIGTERM stops it
after the current pass. ``lg scheduler`` does the same in production.
``--clock-skew`` adds S seconds to time.time here: a scheduler on a host whose
clock is off.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time

from lg_core.config import current_configuration
from lg_scheduler.scheduler import Scheduler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--stall", type=float, default=600.0)
    parser.add_argument("--no-local-liveness", action="store_true")
    parser.add_argument("--clock-skew", type=float, default=0.0)
    args = parser.parse_args()
    if args.clock_skew:
        real_time, skew = time.time, args.clock_skew
        time.time = lambda: real_time() + skew
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler = Scheduler(
        current_configuration().runtime(),
        stall_seconds=args.stall,
        local_liveness=not args.no_local_liveness,
    )
    print("scheduler ready", flush=True)
    scheduler.run_forever(interval=args.interval, stop=stop)


if __name__ == "__main__":
    main()
