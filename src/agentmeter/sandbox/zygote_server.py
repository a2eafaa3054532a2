"""The zygote of root-run local sandboxes: the process side (standard library only; run as a
script, ``python -I -S zygote_server.py FD``, by zygote.py). See zygote.py for the design.

Two roles:

- the *fork server* (one per harness process, host root in the host's namespaces): reads start
  requests on its socket (the fd its argument names), each with the keeper's end of a fresh
  socket pair, and forks a keeper for each; children are reaped by the kernel (SIGCHLD
  ignored). It exits when the harness's end closes.
- a *keeper* (one per sandbox): makes its mount and network namespaces (or joins a network
  namespace), mounts the sandbox tree, brings loopback up, makes the sandbox's user namespace
  and writes its id map, all by system calls (no program run); the id map's child, the
  sandbox's uid 0, makes the sandbox's mount namespace, prepares /dev in it and makes the
  start's workdir and mount targets. A keeper forked ahead has made its namespaces, that
  child with its user namespace (the id map of the starts before, the same for every
  sandbox) and the first exec's child (which gets its cgroup and the namespaces at the setup)
  before its request; else the first exec's child is forked while that child works. Then
  the keeper says ``ready`` and serves exec
  requests: while idle it forks the next exec's child, which joins the sandbox's cgroup, a
  fresh session keyring, the user namespace (uid 0 there) and the sandbox's mount namespace
  and waits; a request goes to it
  (or to a child forked then), which takes the request's stdin/stdout/stderr and seccomp
  program, closes every other descriptor and execs bwrap with the request's arguments. Exit
  statuses go back on the socket. When the socket closes or is shut (stop, or the harness
  died) it kills and reaps what it started and exits, which ends the mount namespaces.

This file only starts the fork server. The code is in its sibling modules: the fork server
(zygote_forkserver.py), the keeper (zygote_keeper.py), the children a keeper forks
(zygote_children.py), the system calls (zygote_calls.py) and the messages (zygote_wire.py).
Run as a script in isolated mode, nothing is on ``sys.path`` but the standard library's: the
siblings are loaded from this file's own directory (the installed package's), never from the
current directory or one an environment variable names, as submodules of a package of that
directory alone (:func:`load`), whose ``__init__`` is not run (they import each other
relatively; imported as ``agentmeter.sandbox.zygote_*``, the same files work as they are).
"""

from __future__ import annotations

import importlib
import os
import sys
import types

#: the package the siblings are loaded under when this file runs as a script
PACKAGE = "agentmeter_zygote"


def load(name: str) -> types.ModuleType:
    """The sibling module ``name`` (``zygote_forkserver``, ...), loaded from this file's own
    directory as a submodule of :data:`PACKAGE`, a package made here of that directory alone."""
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [os.path.dirname(os.path.realpath(__file__))]
        sys.modules[PACKAGE] = package
    return importlib.import_module(f"{PACKAGE}.{name}")


if __name__ == "__main__":
    try:
        load("zygote_forkserver").main()
    except KeyboardInterrupt:
        sys.exit(0)
