"""OCI images from a registry as root file systems for the local backend.

``obtain(ref)`` copies the image with Debian's ``skopeo`` into an OCI layout, unpacks it with
``umoci`` and (run as root) shifts its owners into the sandbox id range (``idmap.py``), as the
Debian base is. Trees are cached under ``<cache>/oci/images/<manifest digest>``: built in a
temporary directory, renamed into place only when complete, under a file lock, so two builders
never race and a half-written tree is never used. A ref, once resolved, keeps its digest (the
docker backend never refreshes a tag either), so a cached image starts without any registry.

A registry is probed first with bounded timeouts (name lookup and connect), and one that cannot
be reached is not tried again by this process: offline, a ref falls back within seconds.
Loopback registries (``localhost:PORT``, ``127.0.0.1:PORT``) are spoken to over plain HTTP.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from agentmeter.notices import notice
from agentmeter.paths import cache_dir, within
from agentmeter.sandbox import idmap
from agentmeter.sandbox.dockerfile import image_emulation
from agentmeter.sandbox.hosttools import OCI_TOOLS, ensure_tools
from agentmeter.sandbox.rootfs import DEBIAN_RELEASE, file_lock
from agentmeter.sandbox.spec import SandboxError

#: bump when the post-processing of unpacked trees changes
OCI_FORMAT = 1
#: seconds for a registry's name lookup and for its TCP connect
PROBE_TIMEOUT_S = 3.0
#: seconds for copying one image (all its blobs)
COPY_TIMEOUT_S = 1800.0
DOCKER_HUB = "registry-1.docker.io"


class ImageUnavailable(SandboxError):
    """The image cannot be had (no registry reachable, no such image, tools missing)."""


@dataclass(frozen=True)
class Reference:
    """A parsed image reference, normalized as Docker does (``python`` is
    ``docker.io/library/python:latest``)."""

    registry: str  # host[:port] as written ("docker.io" for Docker Hub)
    repository: str
    tag: str | None
    digest: str | None

    @property
    def endpoint(self) -> str:
        return DOCKER_HUB if self.registry in ("docker.io", "index.docker.io") else self.registry

    @property
    def host(self) -> str:
        host = self.endpoint
        if host.startswith("["):
            return host[1:].partition("]")[0]
        return host.rpartition(":")[0] if host.count(":") == 1 else host

    @property
    def port(self) -> int:
        tail = self.endpoint.rpartition("]")[2] if self.endpoint.startswith("[") else self.endpoint
        head, sep, port = tail.rpartition(":")
        return int(port) if sep and head and port.isdigit() else (80 if self.loopback else 443)

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def transport(self) -> str:
        """The ``docker://`` form skopeo reads."""
        name = f"{self.registry}/{self.repository}"
        return f"docker://{name}@{self.digest}" if self.digest else f"docker://{name}:{self.tag}"


def parse_reference(ref: str) -> Reference:
    """``ref`` normalized; raises ImageUnavailable for what is not an image reference."""
    name, _, digest = ref.partition("@")
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", name
        if "/" not in path:
            path = f"library/{path}"
    repo, colon, tag = path.rpartition(":")
    if not colon or "/" in tag:
        repo, tag = path, ""
    if not repo or repo != repo.lower() or any(c.isspace() for c in ref):
        raise ImageUnavailable(f"{ref!r} is not a valid image reference")
    return Reference(registry, repo, tag or (None if digest else "latest"), digest or None)


#: FROM images that are agentmeter's Debian base itself: never pulled, never a notice
_SAME_AS_BASE = ("debian:trixie", "debian:13", "debian:stable", "debian:latest", "debian")


def same_as_base(ref: str) -> bool:
    name = ref.removeprefix("docker.io/").removeprefix("library/").split("@")[0]
    return name in _SAME_AS_BASE or name.startswith(("debian:trixie", "debian:13"))


def say_fallback(ref: str, origin: str, why: str, *, emulated: bool | None = None) -> None:
    """The notice that ``ref`` is replaced by the Debian base: once per Dockerfile and image
    (notices are said once per text)."""
    if emulated is None:
        emulated = image_emulation(ref) is not None
    extra = " (with Debian's packages for its runtime)" if emulated else ""
    notice(f"{origin}: FROM {ref}: {why}; built on agentmeter's Debian {DEBIAN_RELEASE} base "
           f"instead{extra}")


# --- reaching registries --------------------------------------------------------------------

_unreachable: dict[str, str] = {}
_probe_lock = threading.Lock()


def _resolve_host(host: str, port: int) -> list[tuple[int, tuple[str, int]]]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(fam, addr[:2]) for fam, _, _, _, addr in infos]  # type: ignore[misc]


def _proxy(ref: Reference) -> tuple[str, int] | None:
    """The HTTPS proxy skopeo would go through for ``ref``, if any (host, port)."""
    if ref.loopback:
        return None
    url = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    no_proxy = (os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or "").split(",")
    if not url or any(n.strip() and ref.host.endswith(n.strip().lstrip("*")) for n in no_proxy):
        return None
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    return (parsed.hostname, parsed.port or 80) if parsed.hostname else None


def probe(ref: Reference) -> str | None:
    """None when ``ref``'s registry (or the HTTPS proxy to it) answers a TCP connect, else why
    not (remembered)."""
    proxy = _proxy(ref)
    if proxy is not None:
        ref = Reference(f"{proxy[0]}:{proxy[1]}", ref.repository, ref.tag, ref.digest)
    key = f"{ref.host}:{ref.port}"
    with _probe_lock:
        if key in _unreachable:
            return _unreachable[key]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    why: str | None = None
    try:  # a name lookup cannot be given a timeout: it runs in a thread we may abandon
        addrs = pool.submit(_resolve_host, ref.host, ref.port).result(PROBE_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        why = f"looking up {ref.host} took over {PROBE_TIMEOUT_S:g}s (offline?)"
    except OSError as e:
        why = f"cannot look up {ref.host} ({e.strerror or e})"
    finally:
        pool.shutdown(wait=False)
    if why is None:
        why = f"cannot connect to {key}"
        for family, addr in addrs:
            try:
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    s.settimeout(PROBE_TIMEOUT_S)
                    s.connect(addr)
                why = None
                break
            except OSError as e:
                why = f"cannot connect to {key} ({e.strerror or e})"
    if why is not None:
        with _probe_lock:
            _unreachable[key] = why
    return why


# --- the cache --------------------------------------------------------------------------------

def oci_dir() -> Path:
    return cache_dir() / "oci"


def _ref_file(ref: str) -> Path:
    return oci_dir() / "refs" / f"{hashlib.sha256(ref.encode()).hexdigest()[:32]}.json"


def _shifting() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class OciImage:
    """An unpacked image: its root file system and what its config says."""

    ref: str
    digest: str  # the manifest's, "sha256:..."
    rootfs: Path
    env: dict[str, str]
    workdir: str | None
    user: str | None

    @property
    def key(self) -> str:
        """What keys the layers built on this tree."""
        shift = idmap.SHIFT_TAG if _shifting() else "unshifted"
        return f"oci-v{OCI_FORMAT}\0{self.digest}\0{shift}"


def _image_dir(digest: str) -> Path:
    tag = "shifted" if _shifting() else "unshifted"
    return oci_dir() / "images" / f"{digest.replace(':', '-')}-v{OCI_FORMAT}-{tag}"


def _load(ref: str, digest: str) -> OciImage | None:
    d = _image_dir(digest)
    try:
        cfg = json.loads((d / "image.json").read_text())
    except (OSError, ValueError):
        return None
    return OciImage(ref=ref, digest=digest, rootfs=d / "rootfs", env=cfg.get("env") or {},
                    workdir=cfg.get("workdir") or None, user=cfg.get("user") or None)


def cached(ref: str) -> OciImage | None:
    """The tree ``ref`` resolved to before, if it is still cached (no registry asked)."""
    try:
        digest = json.loads(_ref_file(ref).read_text())["digest"]
    except (OSError, ValueError, KeyError):
        return None
    return _load(ref, digest)


def _run(argv: list[str], what: str, timeout: float) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ImageUnavailable(f"{what} took longer than {timeout:g}s") from None
    if r.returncode != 0:
        lines = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        last = lines[-1][-400:] if lines else "(no output)"
        low = last.lower()
        if "manifest unknown" in low or "not found" in low or "unauthorized" in low or "denied" in low:
            raise ImageUnavailable(f"the registry has no such image, or it needs a login ({last})")
        raise ImageUnavailable(f"{what} failed: {last}")
    return r.stdout


def _blob(layout: Path, digest: str) -> dict[str, object]:
    algo, _, hexd = digest.partition(":")
    data: dict[str, object] = json.loads((layout / "blobs" / algo / hexd).read_text())
    return data


def _config(layout: Path) -> tuple[str, dict[str, object]]:
    """The manifest digest and the image config's ``config`` section of a one-image layout."""
    index = json.loads((layout / "index.json").read_text())
    manifest_digest: str = index["manifests"][0]["digest"]
    manifest = _blob(layout, manifest_digest)
    config = _blob(layout, manifest["config"]["digest"])  # type: ignore[index]
    section = config.get("config") or {}
    assert isinstance(section, dict)
    return manifest_digest, section


def _fixup(root: Path) -> None:
    """What every sandbox root needs from the host side: /etc/hosts and a plain resolv.conf.
    Run as root on the image's tree: an ``etc``, ``tmp`` or ``var`` that is a link out of it
    (``tmp -> /etc``) is refused, else the host's own would be written and made 1777."""
    for rel in ("etc", "tmp", "var", "var/tmp"):
        if not within(root / rel, root):
            raise ImageUnavailable(f"the image's /{rel} is a symbolic link out of the image")
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    if not (etc / "hosts").exists() and not (etc / "hosts").is_symlink():
        (etc / "hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    resolv = etc / "resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("")
    for d in ("tmp", "var/tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(root / d, 0o1777)


def pull(ref: str) -> OciImage:
    """Copy and unpack ``ref`` (blocking). Raises ImageUnavailable saying why not."""
    parsed = parse_reference(ref)
    why = probe(parsed)
    if why is not None:
        raise ImageUnavailable(f"no registry is reachable: {why}")
    ensure_tools(OCI_TOOLS, "OCI base images on the local backend")
    work = oci_dir() / f".build-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        tls = ["--src-tls-verify=false"] if parsed.loopback else []
        _run(["skopeo", "--command-timeout", f"{int(COPY_TIMEOUT_S)}s", "copy", "--quiet", *tls,
              parsed.transport(), f"oci:{work / 'layout'}:image"],
             f"copying {ref} (skopeo)", COPY_TIMEOUT_S + 30)
        digest, config = _config(work / "layout")
        final = _image_dir(digest)
        with file_lock(oci_dir() / f".lock-{digest.replace(':', '-')[:30]}"):
            if not (final / "image.json").exists():
                rootless = [] if _shifting() else ["--rootless"]
                _run(["umoci", "unpack", *rootless, "--image", f"{work / 'layout'}:image",
                      str(work / "bundle")], f"unpacking {ref} (umoci)", COPY_TIMEOUT_S)
                root = work / "bundle" / "rootfs"
                _fixup(root)
                os.chmod(root, 0o755)
                if _shifting():
                    idmap.shift_tree(root)
                env = dict(str(e).partition("=")[::2] for e in config.get("Env") or [])  # type: ignore[attr-defined]
                (work / "bundle" / "image.json").write_text(json.dumps(
                    {"ref": ref, "digest": digest, "env": env,
                     "workdir": config.get("WorkingDir") or None, "user": config.get("User") or None}))
                for extra in (work / "bundle").glob("*.mtree"):
                    extra.unlink()
                final.parent.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(final, ignore_errors=True)
                os.rename(work / "bundle", final)
        ref_file = _ref_file(ref)
        ref_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"ref": ref, "digest": digest}))
        os.replace(tmp, ref_file)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    found = _load(ref, digest)
    assert found is not None
    return found


def obtain(ref: str) -> OciImage:
    """The cached tree of ``ref``, else pulled (blocking). Raises ImageUnavailable."""
    return cached(ref) or pull(ref)
