"""Where agentmeter keeps things on the host."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Built bases and layers: ``$AGENTMETER_HOME`` or ``~/.cache/agentmeter``."""
    env = os.environ.get("AGENTMETER_HOME")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "agentmeter"


def default_runs_dir() -> Path:
    """Runs (database and artifacts): ``$AGENTMETER_RUNS`` or ``./.agentmeter``."""
    env = os.environ.get("AGENTMETER_RUNS")
    return Path(env).expanduser().resolve() if env else Path.cwd() / ".agentmeter"
