"""The difftest engine's run (stdlib only; see engine.py for what it does): every case for
each side from the same fresh state, its outputs and file side effects written as JSON."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import time
from typing import Any

from .engine_install import bin_dir_of, install_candidate
from .engine_proc import (
    AGENT_UID,
    ORACLE_UID,
    ROOT,
    TEST_DATA,
    Side,
    base_env,
    fresh_dir,
    kill_uid,
    purge_scratch,
    run_as,
)

#: characters of a changed file's text kept in its side-effect entry (the released engine's)
DIFF_CONTENT_LIMIT = 2000
PREP_TIMEOUT_S = 60.0


def write_fixtures(files: dict[str, str], uid: int) -> None:
    for rel, text in files.items():
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not parts or ".." in parts or rel.startswith("/"):
            raise ValueError(f"fixture path {rel!r} is not relative to {TEST_DATA}")
        path = os.path.join(TEST_DATA, *parts)
        d = os.path.dirname(path)
        os.makedirs(d, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o644)
        for p in [path] + [os.path.join(TEST_DATA, *parts[:i]) for i in range(1, len(parts))]:
            os.chown(p, uid, uid)


def manifest(roots: dict[str, str], ignore: set[str], ignore_hidden: bool) -> dict[str, Any]:
    """``{logical path: (sha256, first characters)}`` of the regular files under ``roots``."""
    out: dict[str, Any] = {}
    for label, root in roots.items():
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ignore
                       and not (ignore_hidden and d.startswith("."))]
            for name in files:
                if ignore_hidden and name.startswith("."):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                with os.fdopen(fd, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        continue
                    h = hashlib.sha256()
                    head = b""
                    while chunk := f.read(1 << 20):
                        if len(head) < DIFF_CONTENT_LIMIT * 4:
                            head += chunk[:DIFF_CONTENT_LIMIT * 4]
                        h.update(chunk)
                rel = os.path.relpath(path, root)
                text = head.decode("utf-8", errors="replace")
                out[f"<{label}>/{rel}"] = (h.hexdigest(), text[:DIFF_CONTENT_LIMIT]
                                           + ("\n...[TRUNCATED]" if len(text) > DIFF_CONTENT_LIMIT
                                              else ""))
    return out


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    changes: dict[str, dict[str, Any]] = {}
    for path in sorted(set(before) | set(after)):
        if path not in after:
            changes[path] = {"type": "DEL", "sha256": None, "content": "N/A"}
        elif path not in before:
            changes[path] = {"type": "ADD", "sha256": after[path][0], "content": after[path][1]}
        elif before[path][0] != after[path][0]:
            changes[path] = {"type": "MOD", "sha256": after[path][0], "content": after[path][1]}
    return changes


def rename_command(command: str, old: str, new: str) -> str:
    """Rewrite ``old`` where it is a command word (start, or after | & ; ( $( ` or a newline)."""
    if old == new:
        return command
    pattern = re.compile(r"(^|[|&;(`\n]|\$\()(\s*)" + re.escape(old) + r"(?=$|[\s|&;)`])")
    return pattern.sub(lambda m: m.group(1) + m.group(2) + new, command)


def run_case(case: dict[str, Any], side: Side, cfg: dict[str, Any], command: str) -> dict[str, Any]:
    t0 = time.monotonic()
    # the sides share /tmp, /var/tmp and /dev/shm (the released engine ran them in separate
    # containers): what the other side left there is gone before this side runs, so the
    # candidate never reads the oracle's files and neither side trips over the other's
    purge_scratch(ORACLE_UID if side.uid == AGENT_UID else AGENT_UID)
    if not cfg["leak_tmp_between_cases"]:
        purge_scratch(side.uid)
        fresh_dir(side.tmp, side.uid)
    fresh_dir(TEST_DATA, side.uid)
    fresh_dir(side.home, side.uid)
    write_fixtures(case.get("files") or {}, side.uid)
    env = base_env(side)
    if cfg["rules"] != "released":
        env.update(case.get("env") or {})
    cwd = cfg["cwd"]
    timings: dict[str, float] = {"restore_s": time.monotonic() - t0}
    prep = case.get("prep_script") or ""
    if prep.strip():
        t = time.monotonic()
        r = run_as(side, prep, cwd=TEST_DATA, env=env, timeout=PREP_TIMEOUT_S)
        timings["prep_s"] = time.monotonic() - t
        if r["exit"] != 0:
            return {"prep_failed": True, "prep": r}
    roots = {"TEST_DATA": TEST_DATA, "HOME": side.home}
    if cwd not in ("/", TEST_DATA, side.home):
        roots["CWD"] = cwd
    ignore, hidden = set(cfg["ignore_names"]), bool(cfg["ignore_hidden"])
    t = time.monotonic()
    before = manifest(roots, ignore, hidden)
    timings["manifest_s"] = time.monotonic() - t
    stdin = case["stdin"].encode() if case.get("stdin") is not None else None
    r = run_as(side, command, cwd=cwd, env=env, timeout=float(cfg["case_timeout_sec"]),
               stdin=stdin, merge_stderr=bool(cfg["merge_stderr"]))
    t = time.monotonic()
    r["fs_diff"] = diff(before, manifest(roots, ignore, hidden))
    timings["manifest_s"] += time.monotonic() - t
    timings["total_s"] = time.monotonic() - t0
    r["timings"] = {k: round(v, 6) for k, v in timings.items()}
    return r


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="engine.py")
    ap.add_argument("--config", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sides", choices=("both", "oracle", "candidate"), default="both")
    args = ap.parse_args(argv)
    try:
        with open(args.config, encoding="utf-8") as f:
            cfg = json.load(f)
        with open(args.cases, encoding="utf-8") as f:
            cases = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        print(f"engine: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, mode=0o700, exist_ok=True)
    os.makedirs(f"{ROOT}/.io", mode=0o700, exist_ok=True)
    os.chmod(ROOT, 0o755)
    oracle = Side("oracle", ORACLE_UID, cfg["oracle_bin"])
    candidate = Side("candidate", AGENT_UID, bin_dir_of(cfg["language"]))
    sides = [s for s in (oracle, candidate) if args.sides in ("both", s.name)]
    oracle_exe = os.path.join(cfg["oracle_bin"], cfg.get("oracle_command") or cfg["cli_name"])
    if oracle in sides and not os.path.isfile(oracle_exe):
        print(f"engine: the oracle is not installed: no {oracle_exe} in the environment",
              file=sys.stderr)
        return 3
    build: dict[str, Any] = {"build": True}
    if candidate in sides:
        build = install_candidate(cfg, candidate)
    with open(f"{args.out}/build.json", "w", encoding="utf-8") as f:
        json.dump(build, f)
    if not build["build"]:  # nothing to compare: every case fails Build (Eq. 4)
        sides = []
    for s in sides:
        if s is oracle:  # its HOME and TMPDIR: out of the candidate's reach
            fresh_dir(s.base, s.uid)
            os.chmod(s.base, 0o700)
        fresh_dir(s.home, s.uid)
        fresh_dir(s.tmp, s.uid)
    old = cfg.get("oracle_command") or cfg["cli_name"]
    runs = {"oracle": 0, "candidate": 0}  # commands run per side (the verifier's log shows it)
    with open(f"{args.out}/cases.jsonl", "w", encoding="utf-8") as out:
        for case in cases:
            record: dict[str, Any] = {"id": case["id"], "class": case["class"], "status": "ok"}
            t0 = time.monotonic()
            for s in sides:
                command = case["command"] if s is oracle else rename_command(
                    case["command"], old, cfg["cli_name"])
                runs[s.name] += 1
                try:
                    r = run_case(case, s, cfg, command)
                except (OSError, ValueError) as e:
                    record.update(status="framework_error", error=f"{s.name}: {e}")
                    break
                if r.get("prep_failed"):
                    record.update(status="framework_error",
                                  error=f"{s.name}: the preparation script failed "
                                        f"(exit {r['prep']['exit']}): {r['prep']['stderr'][-300:]}")
                    break
                record[s.name] = r
            record["wall_s"] = round(time.monotonic() - t0, 6)
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
    for s in sides:
        kill_uid(s.uid)
        purge_scratch(s.uid)
    shutil.rmtree(TEST_DATA, ignore_errors=True)
    with open(f"{args.out}/done.json", "w", encoding="utf-8") as f:
        json.dump({"cases": len(cases), "runs": runs}, f)
    print(f"engine: {len(cases)} cases; runs: oracle {runs['oracle']}, candidate "
          f"{runs['candidate']}" + ("" if build["build"] else
                                    " (the candidate did not build: no case runs)"))
    return 0
