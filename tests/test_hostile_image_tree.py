"""A hostile task image's file tree, as the local backend's host side handles it as root
(security review 4): links the image (or a build step running the image's programs as the
sandbox's root) leaves in the tree are never followed onto the host's own files. Unit-level:
no registry, no sandbox."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from agentmeter.sandbox import layers, oci
from agentmeter.sandbox.layer_steps import Step
from agentmeter.sandbox.spec import SandboxSpec


@pytest.mark.parametrize("link", ["etc", "tmp", "var"])
def test_an_unpacked_image_with_a_directory_linked_out_is_refused(tmp_path: Path, link: str) -> None:
    """``oci.pull`` fixes up the unpacked tree (resolv.conf emptied, hosts written, tmp made
    1777): an image whose ``/etc``, ``/tmp`` or ``/var`` links to a host directory had the host's
    resolv.conf emptied, or a 0700 host directory made world-writable."""
    host = tmp_path / "host"
    host.mkdir(mode=0o700)
    os.chmod(host, 0o700)
    (host / "resolv.conf").write_text("nameserver 10.0.0.1\n")
    root = tmp_path / "rootfs"
    root.mkdir()
    os.symlink(str(host), root / link)  # absolute, as a layer may hold it
    with pytest.raises(oci.ImageUnavailable, match=f"/{link} is a symbolic link out"):
        oci._fixup(root)
    assert (host / "resolv.conf").read_text() == "nameserver 10.0.0.1\n"
    assert stat.S_IMODE(host.stat().st_mode) == 0o700
    assert sorted(p.name for p in host.iterdir()) == ["resolv.conf"]


def test_an_independent_layer_drops_package_state_without_following_links(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's install layer built on a hostile image: the image's ``sh`` (as the step's
    root) left ``var -> /var`` and ``root -> /root`` in the upper dir; dropping the layer's
    package state (var/lib/dpkg, var/log, root/.cache, ...) removed the host's own."""
    host = tmp_path / "host"
    for d in ("var/lib/dpkg", "var/log", "root/.cache/agentmeter"):
        (host / d).mkdir(parents=True)
    monkeypatch.setenv("AGENTMETER_HOME", str(tmp_path / "home"))

    class Box:
        async def stop(self, keep_upper: Path | None = None) -> None:
            assert keep_upper is not None
            (keep_upper / "etc").mkdir(parents=True)
            (keep_upper / "etc" / "ld.so.cache").write_text("dropped")
            (keep_upper / "tmp").mkdir()
            os.symlink(str(host / "var"), keep_upper / "var")
            os.symlink(str(host / "root"), keep_upper / "root")

    class Backend:
        async def start_raw(self, *args: object, **kwargs: object) -> Box:
            return Box()

    async def no_step(*args: object, **kwargs: object) -> None:
        return None

    monkeypatch.setattr(layers, "run_step", no_step)
    cache = layers.LocalLayerCache(Backend())  # type: ignore[arg-type]
    asyncio.run(cache._build(Step(key="k", label="install", origin="agent"), "n",
                             layers.Chain(digest="d", base=str(tmp_path)), SandboxSpec(), 10,
                             independent=True))
    assert all((host / d).is_dir() for d in ("var/lib/dpkg", "var/log", "root/.cache/agentmeter"))
    fs = cache.dir / "n" / "fs"
    assert sorted(os.listdir(fs)) == ["etc"] and not os.listdir(fs / "etc")  # the links went
