"""A local sandbox's exec as a command (see local.py's docstring): the bwrap command on the
keeper's tree, entered through the zygote or through the chain of programs (keyctl, the cgroup,
nsenter), its capabilities, mounts, seccomp filter and environment, and the host's setpriv (or
busybox) bound in for an image that lacks one.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from typing import Any

from agentmeter.sandbox import copyout, local_dirs, zygote
from agentmeter.sandbox.hosttools import static_busybox
from agentmeter.sandbox.local_keeper import DEFAULT_PATH, KeeperSandbox
from agentmeter.sandbox.masks import KEYRING_WRAPPER, ROOT_CAPS, proc_masks, root_cap_numbers
from agentmeter.sandbox.spec import SandboxError

#: where an agent exec finds the host's setpriv when the sandbox root has none (a tmpfs of bwrap)
HELPER_DIR = "/dev/.agentmeter"
BUSYBOX = copyout.BUSYBOX


@functools.cache
def host_setpriv() -> list[tuple[str, str]]:
    """The host's setpriv with its dynamic loader (first) and libraries, as (host path, name):
    run through that loader it needs nothing from the sandbox root."""
    prog = shutil.which("setpriv")
    if prog is None:
        raise SandboxError("setpriv (util-linux) not found on the host: install util-linux")
    out = subprocess.run(["ldd", prog], capture_output=True, text=True, check=False).stdout
    loader: list[tuple[str, str]] = []
    libs = [(os.path.realpath(prog), "setpriv")]
    for line in out.splitlines():
        words = line.split()
        if "=>" in words and len(words) > 2 and words[2].startswith("/"):
            libs.append((os.path.realpath(words[2]), words[0]))
        elif words and words[0].startswith("/"):
            loader = [(os.path.realpath(words[0]), os.path.basename(words[0]))]
    if not loader:
        raise SandboxError(f"cannot find the dynamic loader of {prog} (ldd said: {out.strip()})")
    return loader + libs


class CommandSandbox(KeeperSandbox):
    """A local sandbox's commands: an exec's environment and bwrap command."""

    def _env(self, user: str, extra: dict[str, str] | None) -> dict[str, str]:
        name, home = ("root", "/root") if user == "root" else (self.account.name, self.account.home)
        env = {"PATH": DEFAULT_PATH, "HOME": home, "USER": name, "LOGNAME": name,
               "LANG": "C.UTF-8", "TERM": "dumb", "HOSTNAME": self.spec.hostname}
        env.update(self._meta.env)
        env.update(self.spec.env)
        env.update(extra or {})
        return env

    def _direct(self, argv: list[str], cwd: str, env: dict[str, str], user: str) -> dict[str, Any]:
        """An exec without bwrap (zygote_direct.py; the zygote's keeper built its root): what
        ``_command``'s bwrap and setpriv arguments set for the command itself. Root keeps
        ROOT_CAPS (its bounding set cut to them); the agent has no capability at all."""
        if user == "root":
            ids = {"uid": 0, "gid": 0, "groups": [], "caps": root_cap_numbers()}
        else:
            ids = {"uid": self.account.uid, "gid": self.account.gid,
                   "groups": list(self.account.groups), "caps": []}
        return {"argv": argv, "cwd": cwd, "env": env, **ids}

    def _command(self, argv: list[str], cwd: str, env: dict[str, str], user: str,
                 seccomp_fd: int | None = None, busybox: bool = False) -> list[str]:
        assert self._keeper is not None
        cmd: list[str] = []
        if isinstance(self._keeper, zygote.Keeper):
            # the keeper's child joins the keyring, cgroup and namespaces itself (zygote.py)
            cmd.append(zygote.bwrap_path())
        else:
            if self._keyring:
                cmd += KEYRING_WRAPPER
            if self._cgroup is not None:
                files = ":".join(self._cgroup.procs_files)
                cmd += ["sh", "-c", 'for f in $(echo "$0" | tr : " "); do echo $$ > "$f"; done; exec "$@"',
                        files]
            cmd += ["nsenter", "-t", str(self._keeper.pid), "-m"]
            if self._rootless:
                cmd += ["-U", "--preserve-credentials"]
            if self._shifted:
                cmd.append("-U")  # entered last; nsenter then becomes its uid 0 (host SHIFT_BASE)
            cmd.append("-n")  # network: the sandbox's own namespace, with or without pasta
            cmd.append("bwrap")
        # /dev: the one the zygote keeper prepared for this sandbox (zygote_calls.make_dev,
        # what --dev makes), else bwrap's own
        dev = (["--dev-bind", local_dirs.DEV_DIR, "/dev"]
               if isinstance(self._keeper, zygote.Keeper) and self._keeper.dev else ["--dev", "/dev"])
        cmd += ["--bind", self._tree, "/", *dev, "--proc", "/proc",
                "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
                "--hostname", self.spec.hostname, "--die-with-parent", "--new-session",
                "--chdir", cwd, "--clearenv"]
        cmd += proc_masks()
        for i, m in enumerate(self.spec.mounts):
            source = local_dirs.stage_point(i, m.source.is_dir()) if self._shifted else str(m.source)
            cmd += ["--ro-bind" if m.read_only else "--bind", source, m.target]
        if self.spec.network == "full" and self.spec.base != "host":  # network (pasta.py)
            cmd += ["--ro-bind", self._resolv_conf, "/etc/resolv.conf"]
        for k, v in env.items():
            cmd += ["--setenv", k, v]
        if self._rootless and user != "root":
            # a nested user namespace: the agent is uid 1000 without capabilities; its files
            # belong to the namespace's root (the invoking user) outside
            cmd += ["--unshare-user", "--uid", str(self.account.uid), "--gid", str(self.account.gid)]
        if not self._rootless:
            cmd += ["--cap-drop", "ALL"]
            for cap in ROOT_CAPS if user == "root" else ("CAP_SETUID", "CAP_SETGID"):
                cmd += ["--cap-add", cap]
        # seccomp (seccomp.py): Docker's default profile on every exec, root ones included;
        # bwrap applies it last, reading it from a pipe exec() passes (pass_fds) and closes
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        setpriv = ["setpriv"]
        if busybox:  # a copy out (copyout.py): the host's programs only, none of the image's
            cmd += ["--ro-bind", static_busybox(), BUSYBOX]
        if user != "root" and not self._rootless and (busybox or not self._root_has_setpriv):
            for src, name in host_setpriv():  # an image without util-linux (Alpine, busybox)
                cmd += ["--ro-bind", src, f"{HELPER_DIR}/{name}"]
            setpriv = [f"{HELPER_DIR}/{host_setpriv()[0][1]}", "--library-path", HELPER_DIR,
                       f"{HELPER_DIR}/setpriv"]
        cmd.append("--")
        if user != "root" and not self._rootless:
            groups = ([f"--groups={','.join(map(str, self.account.groups))}"] if self.account.groups
                      else ["--clear-groups"])
            cmd += [*setpriv, f"--reuid={self.account.uid}", f"--regid={self.account.gid}",
                    *groups, "--inh-caps=-all", "--"]
        return cmd + argv
