"""git over /app as the verifier may run it: never on the agent's repository configuration.

The repository is copied (root-owned) and its configuration replaced by a neutral one, its hooks,
grafts and shallow file dropped, replace refs ignored and no system or global configuration read:
nothing the agent wrote into .git (core.fsmonitor, aliases, hooks, filters, replace refs) runs or
changes what git reports. The work tree is still /app.
"""

import os
import subprocess
import tempfile

_home = tempfile.mkdtemp()
GIT_DIR = os.path.join(_home, "git")
if os.path.islink("/app/.git") or not os.path.isdir("/app/.git"):
    raise SystemExit("/app/.git is not a directory")
subprocess.run(["cp", "-R", "--no-dereference", "/app/.git", GIT_DIR], check=True)
subprocess.run(["rm", "-rf", f"{GIT_DIR}/config", f"{GIT_DIR}/hooks", f"{GIT_DIR}/info/grafts",
                f"{GIT_DIR}/shallow", f"{GIT_DIR}/commondir"], check=True)
with open(f"{GIT_DIR}/config", "x") as f:
    f.write("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": _home,
       "GIT_DIR": GIT_DIR, "GIT_WORK_TREE": "/app", "GIT_CONFIG_NOSYSTEM": "1",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_NO_REPLACE_OBJECTS": "1", "LC_ALL": "C"}


def run(*args: str, text: bool = True) -> "subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]":
    return subprocess.run(["git", "-c", "safe.directory=*", *args], env=ENV, cwd="/app",
                          capture_output=True, text=text, check=True)


def git(*args: str) -> str:
    out = run(*args).stdout
    assert isinstance(out, str)
    return out
