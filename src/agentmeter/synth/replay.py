"""Replay a released benchmark's ``start.py`` case generator (spec §3.2, §3.3 mode 1).

The script runs in a child Python process (its imports, ``sys.path`` edits and prints stay
there) with :mod:`released_shim` registered as the modules ``BaseRepoAdapter`` and
``DiffTestEngine``, ``random.seed(seed)`` and ``PYTHONHASHSEED=0``; it is loaded under a name other
than ``__main__`` (its engine run is skipped), its adapter class instantiated and
``generate_test_cases()`` called. Each ``TestCase`` becomes a :class:`Case`: class = ``category``,
``mount_files`` -> ``files``, ``prep_script`` and ``env_vars`` kept. As released, a case whose
generation raised is skipped by the script itself (it prints ``Warning: Failed to generate …``);
those warnings are counted. Cases that do not fit a :class:`Case` are skipped and counted too.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentmeter.verify.difftest.config import Case

_WARNING = re.compile(r"^\s*Warning: Failed to generate", re.MULTILINE)
REPLAY_TIMEOUT_S = 300.0


class ReplayError(RuntimeError):
    """The start.py could not be replayed (one line naming the file)."""


@dataclass
class Replayed:
    cases: list[Case]
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    adapter: str = ""
    base_image: str = ""
    #: the adapter overrides sanitize_stdout: the task needs matching stdout_sanitizers
    custom_sanitizer: bool = False


def replay(start_py: Path, seed: int, timeout: float = REPLAY_TIMEOUT_S) -> Replayed:
    """The cases ``start_py`` generates under ``random.seed(seed)`` (ids c0001…)."""
    if not start_py.is_file():
        raise ReplayError(f"{start_py}: no such file")
    with tempfile.TemporaryDirectory(prefix="agentmeter-replay-") as tmp:
        out = Path(tmp) / "out.json"
        env = dict(os.environ, PYTHONHASHSEED="0")
        try:
            r = subprocess.run(
                [sys.executable, "-m", "agentmeter.synth.replay", str(start_py.resolve()),
                 str(seed), str(out)], cwd=start_py.resolve().parent, env=env,
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ReplayError(f"{start_py}: generation did not finish in {timeout:.0f}s") from None
        if r.returncode != 0 or not out.is_file():
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise ReplayError(f"{start_py}: replay failed: {tail}")
        data = json.loads(out.read_text(encoding="utf-8"))
    warnings = [m.strip() for m in r.stdout.splitlines() if _WARNING.match(m)]
    result = Replayed(cases=[], skipped=len(warnings), errors=warnings,
                      adapter=data["adapter"], base_image=data["base_image"],
                      custom_sanitizer=data["custom_sanitizer"])
    for n, raw in enumerate(data["cases"], 1):
        try:
            case = _case(raw, f"c{len(result.cases) + 1:04d}")
        except (ValidationError, TypeError, AttributeError) as e:
            result.skipped += 1
            result.errors.append(f"case {n} of {raw.get('category')!r}: not a valid case: "
                                 f"{str(e).splitlines()[0]}")
            continue
        result.cases.append(case)
    if not result.cases:
        raise ReplayError(f"{start_py}: generate_test_cases() produced no cases")
    return result


def _case(raw: dict[str, Any], case_id: str) -> Case:
    files = {}
    for rel, text in dict(raw["mount_files"] or {}).items():
        if not isinstance(text, str):
            raise TypeError(f"mount_files[{rel!r}] is {type(text).__name__}, not text")
        files[str(rel).removeprefix("/test_data/").lstrip("/")] = text
    return Case.model_validate({
        "id": case_id, "class": raw["category"], "command": raw["command"].strip(),
        "prep_script": raw["prep_script"] or "", "files": files,
        "env": {str(k): str(v) for k, v in dict(raw["env_vars"] or {}).items()}})


# --- the child process ----------------------------------------------------------------------

def _child(start_py: str, seed: int, out: str) -> None:
    from agentmeter.synth import released_shim

    sys.modules["BaseRepoAdapter"] = released_shim
    sys.modules["DiffTestEngine"] = released_shim
    random.seed(seed)
    spec = importlib.util.spec_from_file_location("released_start", start_py)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = released_shim.BaseRepoAdapter
    adapters = [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, base)
                and c is not base and not inspect.isabstract(c)]
    if len(adapters) != 1:
        raise SystemExit(f"{start_py}: expected one adapter class, found "
                         f"{[a.__name__ for a in adapters]}")
    adapter = adapters[0]()
    cases = adapter.generate_test_cases()
    payload = {
        "adapter": type(adapter).__name__, "base_image": str(adapter.base_image),
        "custom_sanitizer": type(adapter).sanitize_stdout is not base.sanitize_stdout,
        "cases": [asdict(c) if isinstance(c, released_shim.TestCase) else
                  {"command": None, "category": str(getattr(c, "category", "?")),
                   "prep_script": "", "mount_files": {}, "env_vars": {}} for c in cases]}
    # a value JSON cannot hold (bytes in mount_files) becomes a marker the host skips
    text = json.dumps(payload, ensure_ascii=False, default=lambda o: {"unserialisable": repr(o)})
    Path(out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), sys.argv[3])
