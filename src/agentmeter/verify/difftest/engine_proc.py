"""The difftest engine's processes (stdlib only; see engine.py): a side's commands run as its
uid under limits, its processes killed, its state made fresh."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

AGENT_UID = 1000
ORACLE_UID = 1001
ROOT = "/difftest"
TEST_DATA = "/test_data"
#: bytes of each stream kept per case (the rest is counted, not stored)
STREAM_CAP = 128 << 10
FSIZE_LIMIT = 64 << 20
NPROC_LIMIT = 512
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
#: environment variables of the sandbox passed to installs and commands (package sources)
PASSED_ENV = re.compile(r"^(PIP_|npm_config_|NPM_CONFIG_|GO[A-Z0-9_]*$|CGO_|LANG$|LC_)")
_PR_SET_NO_NEW_PRIVS = 38


class Side:
    def __init__(self, name: str, uid: int, bin_dir: str) -> None:
        self.name, self.uid, self.bin_dir = name, uid, bin_dir
        self.base = f"{ROOT}/{name}"
        self.home = f"{self.base}/home"
        self.tmp = f"{self.base}/tmp"


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
