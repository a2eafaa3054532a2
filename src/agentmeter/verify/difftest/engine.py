"""agentmeter's differential-testing engine: runs inside a trial's sandbox, as root, stdlib only.

    python3 engine.py --config CONFIG.json --cases CASES.jsonl --out DIR [--sides both|oracle|candidate]

CONFIG is a ``DifftestConfig`` as JSON plus ``workspace`` (the agent's repository). The engine

1. installs the candidate (unless ``--sides oracle``): the agent's workspace is copied, as the
   agent's uid, to ``/difftest/candidate/src`` and the task's one install command runs there as
   that uid with the language's prefix set so the tool lands in ``/difftest/candidate`` (a venv,
   an npm prefix, a GOBIN). Build = exit 0 and ``cli_name`` found in the prefix's ``bin``. The
   prefix is then given to root, so no case can change the installed tool;
2. runs every case for the oracle (uid 1001, ``oracle_bin`` first on PATH) and then for the
   candidate (uid 1000, the oracle's command word rewritten to ``cli_name``), each from the same
   fresh state: an empty ``/test_data`` with the case's files, a fresh HOME and TMPDIR, the
   side's leftover processes killed and its files in /tmp, /var/tmp and /dev/shm removed (the
   oracle's always before the candidate runs; its HOME and TMPDIR are under a 0700 directory,
   so the candidate never reads what the oracle wrote). Each
   command runs under ``sh -c`` in a new session with a time limit (exit 124 when it ends), no
   new privileges, a file-size and a process-count limit, stdin from the case or /dev/null;
   stdout and stderr are captured apart (merged under ``merge_stderr``), each kept up to
   ``STREAM_CAP`` bytes; file side effects are the regular files added, deleted or modified
   under /test_data and HOME (and the working directory), by SHA-256 of their content;
3. writes ``DIR/build.json`` and one JSON line per case to ``DIR/cases.jsonl`` as it goes, then
   ``DIR/done.json`` and a line on stdout with the runs per side. When the candidate did not
   build, no case runs on either side (not the oracle's either: nothing it prints could count).
   Nothing is compared here: the harness compares on the host.

Exit status: 0 done; 2 bad arguments or configuration; 3 the oracle is not installed.

This file only starts it; the code is in its siblings, staged with it (verifier.engine_files):
the run (engine_main.py), the candidate's install (engine_install.py) and the processes
(engine_proc.py). Run in isolated mode (``python3 -I``), nothing is on ``sys.path`` but the
standard library's: the siblings are loaded from this file's own directory (root-only, staged
by the harness), never from the current directory or one an environment variable names, as
submodules of a package of that directory alone (:func:`load`). Imported as
``agentmeter.verify.difftest.engine_*``, the same files work as they are.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

#: the package the siblings are loaded under when this file runs as a script
PACKAGE = "agentmeter_difftest_engine"


def load(name: str) -> types.ModuleType:
    """The sibling module ``name`` (``engine_main``, ...), loaded from this file's own
    directory as a submodule of :data:`PACKAGE`, a package made here of that directory alone."""
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [os.path.dirname(os.path.realpath(__file__))]
        sys.modules[PACKAGE] = package
    return importlib.import_module(f"{PACKAGE}.{name}")


if __name__ == "__main__":
    sys.dont_write_bytecode = True  # the staged directory gets no __pycache__, as before
    sys.exit(load("engine_main").main(sys.argv[1:]))
