"""The difftest engine's install of the candidate (stdlib only; see engine.py): the agent's
workspace copied and installed as the agent's uid, and the shape of what it wrote."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from .engine_proc import ROOT, Side, base_env, fresh_dir, run_as

#: copied from the workspace? never: VCS data, dependency trees, caches, virtualenvs
COPY_EXCLUDES = (".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache",
                 ".pytest_cache")


def bin_dir_of(language: str) -> str:
    return {"python": f"{ROOT}/candidate/venv/bin", "javascript": f"{ROOT}/candidate/npm/bin",
            "go": f"{ROOT}/candidate/bin"}[language]


def install_candidate(cfg: dict[str, Any], side: Side) -> dict[str, Any]:
    src = f"{ROOT}/candidate/src"
    fresh_dir(side.base, side.uid)
    for d in (side.home, side.tmp, src):
        fresh_dir(d, side.uid)
    workspace = cfg["workspace"]
    excludes = " ".join(f"--exclude='{x}'" for x in COPY_EXCLUDES)
    env = base_env(side)
    lang = cfg["language"]
    steps = [f"tar -C '{workspace}' {excludes} -cf - . | tar -C '{src}' -xf -"]
    if lang == "python":
        steps.append(f"python3 -m venv '{ROOT}/candidate/venv'")
    elif lang == "javascript":
        env.update({"npm_config_prefix": f"{ROOT}/candidate/npm",
                    "npm_config_cache": f"{side.home}/.npm"})
    else:
        env.update({"GOBIN": f"{ROOT}/candidate/bin", "GOPATH": f"{ROOT}/candidate/go",
                    "GOCACHE": f"{ROOT}/candidate/gocache"})
        os.makedirs(side.bin_dir, exist_ok=True)
        os.chown(side.bin_dir, side.uid, side.uid)
    t0 = time.monotonic()
    prepare = run_as(side, " && ".join(steps), cwd="/", env=env, timeout=cfg["install_timeout_sec"])
    before = set(os.listdir(side.bin_dir)) if os.path.isdir(side.bin_dir) else set()
    shape = structure(src)  # what the agent wrote, before the install adds its build files
    if prepare["exit"] != 0:
        result = prepare
    else:
        result = run_as(side, cfg["install"], cwd=src, env=env, merge_stderr=True,
                        timeout=max(1.0, cfg["install_timeout_sec"] - (time.monotonic() - t0)))
    after = set(os.listdir(side.bin_dir)) if os.path.isdir(side.bin_dir) else set()
    target = os.path.join(side.bin_dir, cfg["cli_name"])
    resolved = os.path.isfile(target) and os.access(target, os.X_OK)
    helps = {}
    for name in sorted(after - before)[:8]:  # the entry-point report's --help checks
        r = run_as(side, f"'{side.bin_dir}/{name}' --help", cwd=side.home, env=env, timeout=10.0,
                   merge_stderr=True)
        helps[name] = {"exit": r["exit"], "text": r["stdout"][:4000]}
    subprocess.run(["chown", "-R", "-h", "0:0", side.base], check=False)  # read-only from now
    subprocess.run(["chmod", "-R", "go-w", side.base], check=False)
    for d in (side.home, side.tmp):
        fresh_dir(d, side.uid)
    log = (prepare["stdout"] + prepare["stderr"] + (result["stdout"] if result is not prepare
                                                     else ""))
    return {"install_exit": result["exit"], "timed_out": result["timed_out"],
            "duration_s": round(time.monotonic() - t0, 3), "resolved": resolved,
            "build": result["exit"] == 0 and (resolved or not cfg["build_requires_command"]),
            "bin_new": sorted(after - before), "help": helps, "log": log[-(64 << 10):],
            "structure": shape}


#: files above this size are counted as files, not read for lines; and no more than
#: LOC_READ_TOTAL bytes are read for lines in all (then files are still counted)
LOC_READ_MAX = 1 << 20
LOC_READ_TOTAL = 256 << 20


def structure(root: str) -> dict[str, int]:
    """The repository the agent wrote (paper RQ4, Fig. 5): regular files, their lines (text
    files only: no NUL byte in the first 8 KiB), directories below the root, and the depth of
    the deepest file (a file at the root: 1). Symlinks are not followed or counted."""
    files = loc = dirs = depth = read = 0
    for cur, subdirs, names in os.walk(root):
        rel = os.path.relpath(cur, root)
        level = 0 if rel == "." else rel.count(os.sep) + 1
        dirs += sum(1 for d in subdirs if not os.path.islink(os.path.join(cur, d)))
        for name in names:
            path = os.path.join(cur, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            files += 1
            depth = max(depth, level + 1)
            try:
                size = os.path.getsize(path)
                if size > LOC_READ_MAX or read + size > LOC_READ_TOTAL:
                    continue
                read += size
                # no symlink followed, no FIFO waited on (the tree is the candidate's)
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as f:
                    data = f.read(LOC_READ_MAX)
            except OSError:
                continue
            if b"\0" not in data[:8192]:
                loc += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return {"files": files, "loc": loc, "directories": dirs, "depth": depth}
