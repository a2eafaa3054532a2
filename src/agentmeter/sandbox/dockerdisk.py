"""A disk cap for docker containers whose storage driver has none (overlay2 on ext4).

``--storage-opt size=`` is honoured only by overlay2 on xfs with ``pquota``, btrfs and zfs. On
any other overlay2 daemon of this host the container's writable layer (the overlay2 directory
``<data-root>/overlay2/<mount-id>``, holding ``diff`` = the upper dir and ``work``) is moved onto
a filesystem of its own, between ``docker create`` and ``docker start``:

1. a sparse file of ``disk_mb`` MiB is made an ext4 filesystem (no journal, inode tables left
   uninitialised: the file reads as zeros) — about 40 ms, the file holds ~0.2 MB;
2. it is loop-mounted at a private staging point, the layer directory's few entries (``link``,
   ``lower``, the empty ``diff`` and ``work``) copied in, and the staging mount bind-mounted
   over the layer directory; the staging mount is detached and the file unlinked at once, so the
   loop device (auto-clearing) holds the only reference and nothing is left on disk by a crash;
3. the daemon starts the container: overlay mounts ``upperdir=<layer>/diff`` — on the loop
   filesystem. A write past the cap fails with ENOSPC; the host's disk holds at most the file's
   ``disk_mb``. ``docker rm`` unmounts everything under the layer directory before removing it
   (moby's ``EnsureRemoveAll``), which frees the loop device and the file's blocks.

After the start the harness checks that the daemon saw the mount (its ``merged`` directory is
on the loop filesystem); a daemon in another mount namespace would not, and the container is then
refused rather than left uncapped. Only the layer is on the loop filesystem: the images' layers
stay where they are (nothing is re-imported), so the cost is per container, not per CI run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from agentmeter.paths import cache_dir
from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.sandbox.spec import SandboxError

#: the programs the loop-mounted layer needs (command -> Debian package)
DISK_TOOLS = {"mkfs.ext4": "e2fsprogs", "mount": "mount", "umount": "mount"}
#: per cent of the filesystem only root may fill (the agent, uid 1000, stops short of it), so
#: the verifier can still write its reward file after the agent filled the disk
ROOT_RESERVE_PCT = 1
#: how agentmeter may bound a container's disk, from ``AGENTMETER_DOCKER_DISK``: ``auto`` (the
#: default: ``--storage-opt size`` where the driver supports it, else the loop-mounted layer,
#: else the container is refused), ``unenforced`` (neither is possible and the risk is accepted:
#: a notice says the cap is not enforced)
POLICY_ENV = "AGENTMETER_DOCKER_DISK"


def policy() -> str:
    value = os.environ.get(POLICY_ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "unenforced"):
        raise SandboxError(f"{POLICY_ENV}={value!r}: expected 'auto' or 'unenforced'")
    return value


def _sbin_which(cmd: str) -> str | None:
    return shutil.which(cmd) or shutil.which(cmd, path="/usr/sbin:/sbin:/usr/bin:/bin")


def _tool(cmd: str) -> str:
    found = _sbin_which(cmd)
    if found is None:
        raise SandboxError(f"{cmd} not found (needed for the docker disk cap)")
    return found


@dataclass(frozen=True)
class DaemonStorage:
    """What ``docker info`` says about where the daemon keeps containers."""

    driver: str
    root: Path

    def loop_unsupported(self) -> str | None:
        """Why the loop-mounted layer cannot be used with this daemon, None when it can."""
        if self.driver != "overlay2":
            return f"the storage driver is {self.driver!r}, not overlay2"
        if os.geteuid() != 0:
            return "agentmeter does not run as root"
        if not (self.root / "overlay2").is_dir() or not self.layerdb.is_dir():
            return f"the daemon's data-root {self.root} is not on this host (or not readable)"
        if not os.path.exists("/dev/loop-control"):
            return "this host has no loop devices (/dev/loop-control)"
        return None

    @property
    def layerdb(self) -> Path:
        return self.root / "image" / "overlay2" / "layerdb" / "mounts"

    def layer_dir(self, container_id: str) -> Path:
        """The overlay2 directory of a created container's writable layer."""
        try:
            mount_id = (self.layerdb / container_id / "mount-id").read_text().strip()
        except OSError as e:
            raise SandboxError(f"docker disk cap: no layer found for {container_id[:12]}: {e}") \
                from None
        if not mount_id or "/" in mount_id or mount_id.startswith("."):
            raise SandboxError(f"docker disk cap: odd mount id {mount_id!r}")
        return self.root / "overlay2" / mount_id


def disks_dir() -> Path:
    d = cache_dir() / "docker" / "disks"
    d.mkdir(parents=True, exist_ok=True)
    return d


def make_image(size_mb: int) -> Path:
    """A sparse file of ``size_mb`` MiB holding an empty ext4 filesystem (blocking)."""
    ensure_tools(DISK_TOOLS, "the docker disk cap", find=_sbin_which)
    path = disks_dir() / f"layer-{os.getpid()}-{uuid.uuid4().hex[:12]}.img"
    with open(path, "wb") as f:
        f.truncate(size_mb << 20)
    r = subprocess.run([_tool("mkfs.ext4"), "-q", "-F", "-m", str(ROOT_RESERVE_PCT),
                        "-b", "4096", "-i", "16384", "-O", "^has_journal,^resize_inode",
                        "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", str(path)],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        path.unlink(missing_ok=True)
        raise SandboxError(f"docker disk cap: mkfs.ext4 failed: {(r.stdout + r.stderr).strip()}")
    return path


def _run(*argv: str) -> None:
    r = subprocess.run(list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SandboxError(f"docker disk cap: {' '.join(argv)} failed: "
                           f"{(r.stdout + r.stderr).strip()}")


def mount_over(layer: Path, image: Path) -> None:
    """Put the writable layer ``layer`` on the filesystem in ``image`` (see the module's
    docstring); ``image`` is unlinked in every case (blocking)."""
    staging = Path(tempfile.mkdtemp(prefix=f"stage-{os.getpid()}-", dir=disks_dir()))
    mounted = False
    try:
        # noinit_itable: no background zeroing of inode tables (the sparse file reads as zeros)
        _run(_tool("mount"), "-o", "loop,noinit_itable", str(image), str(staging))
        mounted = True
        image.unlink()  # the loop device holds it until the last unmount (autoclear)
        st = os.lstat(layer)
        _run("cp", "-a", "--", f"{layer}/.", f"{staging}/")
        os.rmdir(staging / "lost+found")
        os.chown(staging, st.st_uid, st.st_gid)
        os.chmod(staging, st.st_mode & 0o7777)
        _run(_tool("mount"), "--bind", str(staging), str(layer))
    finally:
        if mounted:
            subprocess.run([_tool("umount"), "-l", str(staging)], capture_output=True)
        image.unlink(missing_ok=True)
        os.rmdir(staging)


def volumes_onto(layer: Path, sources: list[Path]) -> None:
    """Put the container's anonymous volumes (an image's ``VOLUME``: ``sources`` are their
    ``_data`` directories, filled from the image at ``docker create``) on the layer's capped
    filesystem too: each is copied to ``<layer>/volumes/<i>`` and that bind-mounted over it, so
    the daemon mounts it into the container at start (blocking). Without this an agent wrote
    past the cap into any directory the image declares a volume (on the host's disk)."""
    for i, src in enumerate(sources):
        dest = layer / "volumes" / str(i)
        dest.mkdir(parents=True)
        st = os.lstat(src)
        _run("cp", "-a", "--", f"{src}/.", f"{dest}/")
        os.chown(dest, st.st_uid, st.st_gid)
        os.chmod(dest, st.st_mode & 0o7777)
        _run(_tool("mount"), "--bind", str(dest), str(src))


def release_volumes(sources: list[Path]) -> None:
    """Detach :func:`volumes_onto`'s mounts on the host side once the container runs (its own
    mounts of them stay), so that ``docker rm -v`` removes the volumes as usual."""
    for src in sources:
        subprocess.run([_tool("umount"), "-l", str(src)], capture_output=True)


def unmount(layer: Path) -> None:
    """Undo :func:`mount_over` (a container that never started; ``docker rm`` does it too)."""
    subprocess.run([_tool("umount"), "-l", str(layer)], capture_output=True)


def daemon_sees(layer: Path) -> bool:
    """Whether the daemon made the running container's ``merged`` directory on our filesystem:
    a daemon in another mount namespace would have made it in the directory underneath, which
    this process does not see."""
    return os.path.isdir(layer / "merged")


def remove_leftovers() -> int:
    """Remove image files and staging directories whose process is gone (a crash between
    making and mounting them); their names carry the pid of their maker."""
    removed = 0
    d = cache_dir() / "docker" / "disks"
    if not d.is_dir():
        return 0
    for p in d.iterdir():
        kind, _, rest = p.name.partition("-")
        pid = rest.partition("-")[0]
        if kind not in ("layer", "stage") or not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        if kind == "stage":  # a crash between mounting and detaching it
            subprocess.run([_tool("umount"), "-l", str(p)], capture_output=True)
            with contextlib.suppress(OSError):
                p.rmdir()
        else:
            p.unlink(missing_ok=True)
        removed += 1
    return removed
