"""The local stack (``lg stack``): Redis, PostgreSQL, workers, scheduler and Flower as local processes.

servers.py    redis-server and PostgreSQL started from their binaries (also used by the tests)
processes.py  detached processes with pid files: start, check, stop
elsewhere.py  other stacks running on this machine, found from their processes' environment
stack.py      which processes make the stack, their commands (shared with docker/compose.yaml), up/down
"""

from lg_scheduler.stack.stack import LocalStack, StackError, service_commands

__all__ = ["LocalStack", "StackError", "service_commands"]
