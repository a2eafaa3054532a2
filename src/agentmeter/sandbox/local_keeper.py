"""A local sandbox's state and its keeper's start (the keeper: see local.py's docstring): the
overlay tree mounted in a private mount namespace by the keeper script, or, run as root where
the zygote can (``zygote.py``), by a zygote; a compose sidecar's keeper joins the main sandbox's
network namespace (``RUNNING``).
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from agentmeter.sandbox import accounts, cgroups, idmap, local_dirs, rootfs, seccomp, zygote
from agentmeter.sandbox.bridge import BridgeProcess
from agentmeter.sandbox.layers import LayerMeta
from agentmeter.sandbox.masks import proc_mask_list, root_cap_numbers
from agentmeter.sandbox.netsetup import SandboxNetwork
from agentmeter.sandbox.pasta import Pasta, resolv_conf
from agentmeter.sandbox.spec import SandboxError, SandboxSpec

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_KEEPER_SCRIPT = r"""
set -e
cd "$AM_LAYERS"
ip link set lo up & lo=$!  # beside the mounts; waited for (and its failure fatal) below
if [ -n "$AM_DISK" ]; then
  mount -t tmpfs -o "size=${AM_DISK}m,mode=0755" tmpfs "$AM_RW"
  mkdir -p "$AM_RW/upper" "$AM_RW/work"
  if [ -n "$AM_OWNER" ]; then chown "$AM_OWNER" "$AM_RW/upper"; fi
fi
mount -t overlay overlay -o "$AM_OVL_OPTS" "$AM_MERGED"
for d in $AM_HOST_DIRS; do
  mount --rbind "$d" "$AM_MERGED$d"; mount -o remount,bind,ro,nodev,nosuid "$AM_MERGED$d"
done
wait "$lo"
if [ -n "$AM_OWNER" ]; then
  # the network namespace is host root's: let the sandbox bind ports < 1024 in it, as Docker does
  echo 0 > /proc/sys/net/ipv4/ip_unprivileged_port_start
  while [ $# -gt 0 ]; do mount --rbind "$1" "$2"; shift 2; done  # staged mount sources
  # the sandbox's user namespace; the harness writes its id map after "ready"
  exec unshare --user sh -c 'echo ready; while read -r _; do :; done'
fi
echo ready
exec cat >/dev/null
"""


#: running sandboxes by id, for a sidecar that joins one's network (SandboxSpec.join_network)
RUNNING: dict[str, KeeperSandbox] = {}


@functools.cache
def _keyctl_nr() -> int | None:
    """keyctl's syscall number here; None (no zygote: the chain of programs) elsewhere."""
    table = {"x86_64": seccomp.X86_64, "aarch64": seccomp.AARCH64}.get(platform.machine())
    return None if table is None else table["keyctl"]


def _joined_netns(sid: str, rootless: bool) -> list[str]:
    """The command prefix that starts a keeper in the network namespace of sandbox ``sid``
    (made by host root, so nothing in either sandbox can change it; see local.py's docstring)."""
    box = RUNNING.get(sid)
    if box is None or box._keeper is None or box._keeper.poll() is not None:
        raise SandboxError(f"cannot join the network of sandbox {sid}: it is not running")
    if rootless:
        raise SandboxError("compose sidecars need the local backend run as root (a sidecar "
                           "joins the main sandbox's network namespace)")
    return ["nsenter", f"--net=/proc/{box._keeper.pid}/ns/net"]


class KeeperSandbox:
    """A local sandbox's state, its tree and its keeper's start (its commands: local_command.py,
    their run: local_exec.py, the rest: local.py)."""

    def __init__(self, spec: SandboxSpec, sid: str, directory: Path, lowers: list[str],
                 meta: LayerMeta, rootless: bool, layers_dir: Path, keyring: bool = True) -> None:
        self.id = sid
        self.spec = spec
        self.dir = directory
        self._lowers = lowers
        self._meta = meta
        self._rootless = rootless
        #: run as root: the sandbox's own user namespace on the shifted id range
        self._shifted = not rootless
        self._keyring = keyring
        self._layers_dir = layers_dir
        self._keeper: subprocess.Popen[bytes] | zygote.Keeper | None = None
        self._cgroup: cgroups.Cgroup | None = None
        self._bridge: BridgeProcess | None = None
        self._pasta: Pasta | None = None  # network = "full" (pasta.py)
        self.network = SandboxNetwork()  # the proxy, if any (netsetup.py)
        self._stopped = False
        #: who the exec user 'agent' is (resolved in _start: accounts.py)
        self.account = accounts.SANDBOX_ACCOUNT
        self._root_has_setpriv = any(
            os.path.lexists(Path(layers_dir, lower, rel)) for lower in lowers
            for rel in ("usr/bin/setpriv", "bin/setpriv", "usr/sbin/setpriv", "sbin/setpriv"))

    @property
    def workdir(self) -> str:
        return self.spec.workdir or self._meta.workdir or "/workspace"

    @property
    def _tree(self) -> str:
        """Where the keeper mounts the sandbox tree (in its own mount namespace)."""
        return f"{local_dirs.STAGE_DIR}/root" if self._shifted else f"{self.dir}/merged"

    @property
    def _resolv_conf(self) -> str:
        """The sandbox's resolv.conf (network "full") where bwrap can reach it."""
        if self._shifted:
            return local_dirs.stage_point(len(self.spec.mounts), False)
        return str(self.dir / "resolv.conf")

    @property
    def upper(self) -> Path:
        return self.dir / "rw" / "upper"

    def _start_keeper(self) -> None:
        (self.dir / "rw").mkdir(parents=True)
        if not self._shifted:
            (self.dir / "merged").mkdir()
        if not self.spec.limits.disk_mb:  # else made in the keeper's tmpfs
            for d in ("upper", "work"):
                (self.dir / "rw" / d).mkdir()
            if self._shifted:
                os.chown(self.upper, idmap.SHIFT_BASE, idmap.SHIFT_BASE)
        opts = f"lowerdir={':'.join(self._lowers)},upperdir={self.dir}/rw/upper,workdir={self.dir}/rw/work"
        if self._rootless:
            opts += ",userxattr"
        host_dirs = " ".join(rootfs.host_bind_dirs()) if self.spec.base == "host" else ""
        env = {
            "PATH": os.environ.get("PATH", DEFAULT_PATH),
            "AM_LAYERS": str(self._layers_dir),
            "AM_RW": f"{self.dir}/rw",
            "AM_MERGED": self._tree,
            "AM_OVL_OPTS": opts,
            "AM_HOST_DIRS": host_dirs,
            "AM_DISK": str(self.spec.limits.disk_mb or ""),
            "AM_OWNER": f"{idmap.SHIFT_BASE}:{idmap.SHIFT_BASE}" if self._shifted else "",
        }
        # network: every sandbox has a network namespace of its own; "full" ones are attached
        # to the outside by pasta (pasta.py, in _start), never to the host's loopback
        cmd = ["unshare", "--mount", "--propagation", "private", "--net"]
        if self.spec.join_network is not None:  # a compose sidecar: the main sandbox's network
            cmd = [*_joined_netns(self.spec.join_network, self._rootless), *cmd[:-1]]
        if self._rootless:
            cmd[1:1] = ["--user", "--map-root-user"]
        cmd += ["sh", "-c", _KEEPER_SCRIPT, "sh"]
        if self.spec.network == "full":  # network: written now, so the keeper can stage it
            (self.dir / "resolv.conf").write_text(resolv_conf()[0])
        if self._shifted and _keyctl_nr() is not None:  # the zygote (zygote.py)
            self._start_zygote(opts, host_dirs)
            return
        if self._shifted:
            for i, m in enumerate(self.spec.mounts):
                cmd += [str(m.source), local_dirs.stage_point(i, m.source.is_dir())]
            if self.spec.network == "full":
                cmd += [str(self.dir / "resolv.conf"), self._resolv_conf]
        keeper = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env, start_new_session=True)
        assert keeper.stdout is not None
        line = keeper.stdout.readline()
        if line.strip() == b"ready" and self._shifted:
            line = idmap.write_id_map(keeper.pid)
        if line.strip() != b"ready":
            keeper.kill()
            _, err = keeper.communicate()
            raise SandboxError(f"sandbox {self.id} failed to start: {err.decode(errors='replace').strip()}")
        self._keeper = keeper
        RUNNING[self.id] = self
        (self.dir / "owner.json").write_text(local_dirs.owner_record(keeper.pid))

    def _exec_root(self) -> dict[str, Any]:
        """What an exec without bwrap builds as its root (zygote_root.py): what
        local_command.py's bwrap arguments make, in the keeper's mount namespace's paths."""
        mounts = [[local_dirs.stage_point(i, m.source.is_dir()), m.target, m.read_only]
                  for i, m in enumerate(self.spec.mounts)]
        if self.spec.network == "full" and self.spec.base != "host":
            mounts.append([self._resolv_conf, "/etc/resolv.conf", True])
        return {"tree": self._tree, "dev": local_dirs.DEV_DIR, "hostname": self.spec.hostname,
                "masks": [list(m) for m in proc_mask_list()], "mounts": mounts,
                "caps": root_cap_numbers(), "owner": idmap.SHIFT_BASE,
                "seccomp": seccomp.program().hex() if seccomp.supported() else None}

    def _start_zygote(self, opts: str, host_dirs: str) -> None:
        """The keeper as a zygote (zygote.py): the script above, as system calls."""
        binds = [[str(m.source), local_dirs.stage_point(i, m.source.is_dir())]
                 for i, m in enumerate(self.spec.mounts)]
        if self.spec.network == "full":
            binds.append([str(self.dir / "resolv.conf"), self._resolv_conf])
        join = None
        if self.spec.join_network is not None:  # a compose sidecar: the main sandbox's network
            join = _joined_netns(self.spec.join_network, self._rootless)[1].removeprefix("--net=")
        # the workdir and the mount targets bwrap binds on, made by the keeper at its setup
        # (a target it could not make fails the start, as the first bwrap did before)
        targets = [(m.target, m.source.is_dir()) for m in self.spec.mounts]
        if self.spec.network == "full" and self.spec.base != "host":
            targets.append(("/etc/resolv.conf", False))
        # and /dev and /proc, which an image may lack (bwrap made them in the tree itself)
        mkdir = {"tree": self._tree,
                 "dirs": ["/dev", "/proc", self.workdir, *(t for t, d in targets if d)],
                 "files": [t for t, d in targets if not d]}
        try:
            keeper = zygote.start_keeper({
                "layers": str(self._layers_dir), "rw": f"{self.dir}/rw", "tree": self._tree,
                "overlay_opts": opts, "host_dirs": host_dirs.split(),
                "disk_mb": self.spec.limits.disk_mb or 0, "owner": idmap.SHIFT_BASE,
                "binds": binds, "id_map": f"0 {idmap.SHIFT_BASE} {idmap.SHIFT_SIZE}\n",
                "join_netns": join, "keyctl_nr": _keyctl_nr(), "keyring": self._keyring,
                "dev": local_dirs.DEV_DIR, "mkdir": mkdir, "root": self._exec_root(),
                "cgroup": [] if self._cgroup is None else self._cgroup.procs_files})
        except SandboxError as e:
            raise SandboxError(f"sandbox {self.id} failed to start: {e}") from e
        self._keeper = keeper
        RUNNING[self.id] = self
        (self.dir / "owner.json").write_text(local_dirs.owner_record(keeper.pid))
