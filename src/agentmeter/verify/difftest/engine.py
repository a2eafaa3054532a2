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
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any

AGENT_UID = 1000
ORACLE_UID = 1001
ROOT = "/difftest"
TEST_DATA = "/test_data"
#: bytes of each stream kept per case (the rest is counted, not stored)
STREAM_CAP = 128 << 10
#: characters of a changed file's text kept in its side-effect entry (the released engine's)
DIFF_CONTENT_LIMIT = 2000
FSIZE_LIMIT = 64 << 20
NPROC_LIMIT = 512
PREP_TIMEOUT_S = 60.0
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
#: copied from the workspace? never: VCS data, dependency trees, caches, virtualenvs
COPY_EXCLUDES = (".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache",
                 ".pytest_cache")
#: environment variables of the sandbox passed to installs and commands (package sources)
PASSED_ENV = re.compile(r"^(PIP_|npm_config_|NPM_CONFIG_|GO[A-Z0-9_]*$|CGO_|LANG$|LC_)")
_PR_SET_NO_NEW_PRIVS = 38


class Side:
    def __init__(self, name: str, uid: int, bin_dir: str) -> None:
        self.name, self.uid, self.bin_dir = name, uid, bin_dir
        self.base = f"{ROOT}/{name}"
        self.home = f"{self.base}/home"
        self.tmp = f"{self.base}/tmp"


# --- processes ---------------------------------------------------------------------------------

def _limits() -> None:  # in the child, before exec (still root, so it may lower its limits)
    os.setsid()
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_NPROC, (NPROC_LIMIT, NPROC_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        os._exit(126)


def uid_pids(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _kill_all_as(uid: int) -> None:
    """kill(-1, SIGKILL) from a child that has become ``uid``: every process of that uid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def kill_uid(uid: int) -> int:
    """SIGKILL every process of ``uid`` (rounds, for a forking one); how many were found."""
    found = 0
    for _ in range(50):
        pids = uid_pids(uid)
        if not pids:
            break
        found += len(pids)
        _kill_all_as(uid)
        time.sleep(0.002)
    return found


def run_as(side: Side, command: str, *, cwd: str, env: dict[str, str], timeout: float,
           stdin: bytes | None = None, merge_stderr: bool = False) -> dict[str, Any]:
    """``sh -c command`` as the side's uid; outputs to root-only files, read back capped."""
    io_dir = tempfile.mkdtemp(prefix="io-", dir=f"{ROOT}/.io")
    out_path, err_path = f"{io_dir}/out", f"{io_dir}/err"
    in_path = f"{io_dir}/in"
    with open(in_path, "wb") as f:
        f.write(stdin or b"")
    t0 = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err, open(in_path, "rb") as inp:
        try:
            proc = subprocess.Popen(
                ["sh", "-c", command], cwd=cwd, env=env, stdin=inp if stdin is not None
                else subprocess.DEVNULL, stdout=out, stderr=out if merge_stderr else err,
                user=side.uid, group=side.uid, extra_groups=[], preexec_fn=_limits,
                close_fds=True)
        except OSError as e:
            shutil.rmtree(io_dir, ignore_errors=True)
            return {"exit": 127, "stdout": "", "stderr": f"engine: cannot start: {e}",
                    "stdout_bytes": 0, "stdout_truncated": False, "timed_out": False,
                    "duration_s": 0.0}
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = 124
    duration = time.monotonic() - t0
    kill_uid(side.uid)  # whatever it left running (daemons, a fork bomb) ends with the case
    result: dict[str, Any] = {"exit": code if code >= 0 else 128 - code, "timed_out": timed_out,
              "duration_s": round(duration, 6)}
    for key, path in (("stdout", out_path), ("stderr", err_path)):
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            data = f.read(STREAM_CAP)
        result[key] = data.decode("utf-8", errors="replace")
        result[f"{key}_bytes"] = size
        result[f"{key}_truncated"] = size > STREAM_CAP
    shutil.rmtree(io_dir, ignore_errors=True)
    return result


def base_env(side: Side) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if PASSED_ENV.match(k)}
    env.update({"PATH": f"{side.bin_dir}:{SAFE_PATH}", "HOME": side.home, "TMPDIR": side.tmp,
                "LANG": env.get("LANG", "C.UTF-8"), "TZ": "UTC", "NO_COLOR": "1",
                "TERM": "dumb", "COLUMNS": "80", "USER": side.name, "LOGNAME": side.name})
    return env


# --- state -------------------------------------------------------------------------------------

def fresh_dir(path: str, uid: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, mode=0o755)
    os.chown(path, uid, uid)


def purge_scratch(uid: int) -> None:
    for top in SCRATCH_DIRS:
        try:
            entries = os.listdir(top)
        except OSError:
            continue
        for name in entries:
            p = os.path.join(top, name)
            try:
                if os.lstat(p).st_uid != uid:
                    continue
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)
            except OSError:
                continue


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


# --- commands ----------------------------------------------------------------------------------

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


# --- the candidate's install -------------------------------------------------------------------

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


# --- main --------------------------------------------------------------------------------------

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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
