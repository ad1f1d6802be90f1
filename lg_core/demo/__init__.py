"""The offline ``lg demo``: streaming, then a run that survives SIGKILL.

* :mod:`lg_core.demo.support` - the agents, the help-center tool and the
  scripted models (registered on import, so any process can resume a run).
* :mod:`lg_core.demo.crash` - the child process that starts a run on a file
  store and SIGKILLs itself inside a tool call.
* :mod:`lg_core.demo.walkthrough` - the narrated demo ``lg demo`` prints.
"""
