"""Copies out of a sandbox that its image cannot subvert (copyout.py, untar.py).

(a) a sandbox whose ``tar``, ``sh``, ``head`` and ``cat`` on PATH are hostile scripts that print
a crafted archive: the copy runs the host's busybox instead, and nothing lands outside the
destination (local; one docker case). (b) untar.py refuses each kind of hostile member, the
CVE-2025-4517 symlink chain included. (c) an artifact path replaced by a symlink to a root-only
file or the staged tests, or running through one: nothing of them is stored.
"""

from __future__ import annotations

import io
import os
import secrets
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agentmeter.sandbox import untar
from agentmeter.sandbox.archive import CopyTooLarge
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.spec import SandboxError, SandboxSpec

Add = Callable[..., None]


def _tar(build: Callable[[Add], object]) -> bytes:
    """A tar stream made by ``build(add)``; ``add(name, type, data=b"", linkname="", mode=0o644)``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", linkname: str = "",
                mode: int = 0o644) -> None:
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.mode, ti.size = kind, linkname, mode, len(data)
            tar.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        build(add)
    return buf.getvalue()


def _cve_2025_4517(add: Add, target: str) -> None:
    """The published shape of CVE-2025-4517: nested long-named directories and symlinks whose
    resolved length overflows PATH_MAX, so ``os.path.realpath`` (the data filter) stops resolving
    and lets a final ``../`` link escape; then a write through it. ``target``: a directory
    outside the destination (relative to the destination's parent)."""
    comp = "d" * 247
    steps = "abcdefghijklmnop"
    path = ""
    for step in steps:
        add(os.path.join(path, comp), tarfile.DIRTYPE, mode=0o755)
        add(os.path.join(path, step), tarfile.SYMTYPE, linkname=comp)
        path = os.path.join(path, comp)
    linkpath = os.path.join("/".join(steps), "l" * 254)
    add(linkpath, tarfile.SYMTYPE, linkname="../" * len(steps))
    add("escape", tarfile.SYMTYPE, linkname=f"{linkpath}/../{target}")
    add("escape/pwned", data=b"cve-2025-4517\n")


def _hostile_stream(outside: Path, pwned: Path | None = None) -> bytes:
    """Every hostile member at once; ``outside`` is the directory beside the destination that
    nothing may reach, ``pwned`` another absolute path."""
    def build(add: Add) -> None:
        add(".", tarfile.DIRTYPE, mode=0o755)
        if pwned is not None:
            add(str(pwned), data=b"absolute\n")
        add(str(outside / "abs-pwned"), data=b"absolute\n")
        add("../abs-dotdot", data=b"dotdot\n")
        add("ln", tarfile.SYMTYPE, linkname=str(outside))
        add("ln/through-symlink", data=b"through\n")
        add("rel", tarfile.SYMTYPE, linkname="../" + outside.name)
        add("rel/through-rel", data=b"through\n")
        add("passwd", tarfile.LNKTYPE, linkname="/etc/passwd")
        add("null", tarfile.CHRTYPE)
        _cve_2025_4517(add, outside.name)
        add("ok.txt", data=b"fine\n")
    return _tar(build)


def _nothing_outside(base: Path, dest: Path, outside: Path) -> None:
    assert sorted(p.name for p in base.iterdir()) == sorted({dest.name, outside.name})
    assert list(outside.iterdir()) == []
    for p in dest.rglob("*"):
        if p.is_symlink():
            target = os.readlink(p)
            assert not target.startswith("/") and ".." not in target.split("/"), (p, target)


# -- (b) untar.py -------------------------------------------------------------------------

@pytest.fixture
def where(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    return tmp_path / "dest", outside


def _extract(data: bytes, dest: Path, **kw: object) -> untar.Result:
    return untar.extract(io.BytesIO(data), dest, what="test", max_bytes=1 << 20, **kw)  # type: ignore[arg-type]


def test_untar_refuses_every_hostile_member(where: tuple[Path, Path]) -> None:
    dest, outside = where
    res = _extract(_hostile_stream(outside), dest)
    _nothing_outside(dest.parent, dest, outside)
    assert (dest / "ok.txt").read_bytes() == b"fine\n"
    assert not (dest / "passwd").exists() and not (dest / "null").exists()
    # the escaping links are dropped: what was written "through" them lands inside
    assert not (dest / "ln").is_symlink() and (dest / "ln" / "through-symlink").is_file()
    assert not (dest / "rel").is_symlink() and (dest / "rel" / "through-rel").is_file()
    text = "\n".join(res.notes)
    for bit in ("abs-pwned: absolute or '..' path refused", "../abs-dotdot: absolute",
                "ln: symbolic link to /", "rel: symbolic link to ../outside",
                "passwd: hard link to /etc/passwd", "null: device, FIFO",
                "escape: symbolic link to"):
        assert bit in text, (bit, text)


def test_untar_cve_2025_4517_chain_alone(where: tuple[Path, Path]) -> None:
    dest, outside = where
    _extract(_tar(lambda add: _cve_2025_4517(add, outside.name)), dest)
    _nothing_outside(dest.parent, dest, outside)
    # what is kept of the chain: relative links with no '..', resolving inside
    assert (dest / "a").is_symlink() and os.readlink(dest / "a") == "d" * 247


def test_untar_write_through_inside_link_is_refused(where: tuple[Path, Path]) -> None:
    dest, _ = where

    def build(add: Add) -> None:
        add("sub", tarfile.DIRTYPE, mode=0o755)
        add("in", tarfile.SYMTYPE, linkname="sub")  # kept: relative, inside
        add("in/x", data=b"x")  # never written through a link, even an inside one
    res = _extract(_tar(build), dest)
    assert os.readlink(dest / "in") == "sub" and not (dest / "sub" / "x").exists()
    assert any("in/x: not written" in n for n in res.notes), res.notes


def test_untar_hard_links_become_copies(where: tuple[Path, Path]) -> None:
    dest, _ = where

    def build(add: Add) -> None:
        add("a", data=b"A")
        add("b", tarfile.LNKTYPE, linkname="a")
        add("c", tarfile.LNKTYPE, linkname="missing")
        add("d", tarfile.LNKTYPE, linkname="../a")
    res = _extract(_tar(build), dest)
    assert (dest / "b").read_bytes() == b"A"
    assert os.stat(dest / "a").st_ino != os.stat(dest / "b").st_ino
    assert not (dest / "c").exists() and not (dest / "d").exists()
    assert sum("hard link to" in n for n in res.notes) == 2


def test_untar_fifo_modes_and_names(where: tuple[Path, Path]) -> None:
    dest, _ = where

    def build(add: Add) -> None:
        add("fifo", tarfile.FIFOTYPE)
        add("blk", tarfile.BLKTYPE)
        add("suid", data=b"s", mode=0o6777)
        add("locked", tarfile.DIRTYPE, mode=0o1000)
        add("locked/f", data=b"f", mode=0o000)
        add("caf\udce9", data=b"latin-1 name")  # the byte 0xe9, not UTF-8
    res = _extract(_tar(build), dest)
    assert not (dest / "fifo").exists() and not (dest / "blk").exists()
    assert sum("device, FIFO" in n for n in res.notes) == 2
    assert stat.S_IMODE(os.stat(dest / "suid").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(dest / "locked").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(dest / "locked" / "f").st_mode) == 0o600
    assert (dest / os.fsdecode(b"caf\xe9")).read_bytes() == b"latin-1 name"  # its own bytes


def test_untar_caps_depth_and_members(where: tuple[Path, Path],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    dest, _ = where
    deep = "/".join(["d"] * (untar.MAX_DEPTH + 1))
    res = _extract(_tar(lambda add: add(deep + "/f", data=b"x")), dest)
    assert any(f"deeper than {untar.MAX_DEPTH}" in n for n in res.notes)
    monkeypatch.setattr(untar, "MAX_MEMBERS", 3)
    res = _extract(_tar(lambda add: [add(f"f{i}", data=b"x") for i in range(5)]), dest / "m")
    assert sorted(p.name for p in (dest / "m").iterdir()) == ["f0", "f1", "f2"]
    assert any("more than 3 members" in n for n in res.notes)


def test_untar_writes_nothing_unless_complete(where: tuple[Path, Path]) -> None:
    dest, _ = where
    data = _tar(lambda add: (add("a", data=b"A" * 5000), add("b", data=b"B" * 5000)))
    with pytest.raises(untar.UntarError):
        _extract(data[:7000], dest)  # cut inside b's data
    with pytest.raises(CopyTooLarge):
        untar.extract(io.BytesIO(data), dest, what="t", max_bytes=6000)
    assert not dest.exists() and list(dest.parent.iterdir()) == [dest.parent / "outside"]


def test_untar_symlink_top_is_not_extracted(where: tuple[Path, Path]) -> None:
    dest, _ = where
    res = _extract(_tar(lambda add: add("art", tarfile.SYMTYPE, linkname="/tests")), dest,
                   top="art")
    assert res.top_kind == "symlink" and not dest.exists()


# -- (a) hostile programs in the sandbox -----------------------------------------------------

_PLANT = r"""
/bin/cat > /usr/local/share/evil.tar
for p in tar sh head cat; do
  printf '#!/bin/bash\nexec /bin/cat /usr/local/share/evil.tar\n' > "/usr/local/bin/$p"
  /bin/chmod 0755 "/usr/local/bin/$p"
done
"""


async def _plant(sb: Sandbox, stream: bytes) -> None:
    """/usr/local/bin/{tar,sh,head,cat}, first on PATH, each printing ``stream``; written last
    (write_file itself runs sh and cat)."""
    await sb.exec(["install", "-d", "-m", "0777", "/logs/artifacts/sub"], user="root", cwd="/")
    await sb.write_file("/logs/artifacts/sub/real.txt", b"real\n", user="agent")
    await sb.write_file("/logs/artifacts/r.txt", b"reward\n", user="agent")
    r = await sb.exec(["/bin/bash", "-c", _PLANT], stdin=stream, user="root", cwd="/")
    assert r.exit_code == 0, r.stderr
    r = await sb.exec(["tar", "-c", "."], user="agent", cwd="/")
    assert r.exit_code == 0 and "ok.txt" in r.stdout  # the image's tar is the hostile one


async def _copy_with_hostile_tar(sb: Sandbox, base: Path) -> None:
    outside, dest = base / "outside", base / "dest"
    outside.mkdir()
    pwned = Path(f"/tmp/agentmeter-pwned-{secrets.token_hex(4)}")
    await _plant(sb, _hostile_stream(outside, pwned))
    try:
        await sb.copy_out("/logs/artifacts", dest)
        _nothing_outside(base, dest, outside)
        assert not pwned.exists()
        # what came out is the sandbox's real tree, made by the host's busybox
        assert (dest / "sub" / "real.txt").read_bytes() == b"real\n"
        assert not (dest / "ok.txt").exists()
        # read_file, too, runs none of the image's programs
        assert await sb.read_file("/logs/artifacts/r.txt") == b"reward\n"
    finally:
        if pwned.exists():
            pwned.unlink()


async def test_hostile_tar_in_the_image_local(local_backend: LocalBackend, tmp_path: Path) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        await _copy_with_hostile_tar(sb, tmp_path)
    finally:
        await sb.stop()


@pytest.mark.docker
async def test_hostile_tar_in_the_image_docker(docker_backend: Sandbox, tmp_path: Path) -> None:
    sb = await docker_backend.start(SandboxSpec())  # type: ignore[attr-defined]
    try:
        await _copy_with_hostile_tar(sb, tmp_path)
    finally:
        await sb.stop()


# -- (c) artifact paths replaced by symlinks ---------------------------------------------------

SECRET = b"root-only-secret-4f1c\n"
HIDDEN = b"hidden-test-9a2e\n"


async def test_symlinked_artifact_paths_store_nothing(local_backend: LocalBackend,
                                                      tmp_path: Path) -> None:
    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.write_file("/opt/secret", SECRET, mode=0o600)
        await sb.write_file("/tests/test_hidden.py", HIDDEN, mode=0o600)
        await sb.exec(["chmod", "0700", "/tests"], user="root", cwd="/")
        await sb.exec(["install", "-d", "-m", "0777", "/logs/artifacts", "/app"], user="root")
        agent = ("ln -s /opt/secret /app/out.txt; ln -s /tests /app/outdir; "
                 "ln -s / /app/root; ln -s /tests /logs/artifacts/tests; "
                 "ln -s /opt/secret /logs/artifacts/secret")
        assert (await sb.exec(agent, user="agent", cwd="/")).exit_code == 0
        stored = tmp_path / "store"
        notes: list[str] = []
        for i, src in enumerate(("/app/out.txt", "/app/outdir", "/app/root/tests",
                                 "/app/root/opt/secret", "/app/outdir/test_hidden.py")):
            # as the agent (the default): refused, or unreadable to it anyway
            with pytest.raises(SandboxError, match="symbolic link|Permission denied"):
                await sb.copy_out(src, stored / str(i))
            with pytest.raises(SandboxError, match="symbolic link|Permission denied"):
                await sb.read_file(src)
            # as root (the harness's own copies): refused, never followed
            with pytest.raises(SandboxError, match="symbolic link"):
                await sb.copy_out(src, stored / f"root{i}", user="root")
            with pytest.raises(SandboxError, match="symbolic link"):
                await sb.read_file(src, user="root")
        notes += await sb.copy_out("/logs/artifacts", stored / "conventional")
        assert any("tests: symbolic link to /tests" in n for n in notes), notes
        # the agent's own user cannot read them even by their real paths
        with pytest.raises(SandboxError, match="Permission denied"):
            await sb.copy_out("/opt/secret", stored / "direct")
        notes = await sb.copy_out("/tests", stored / "direct")  # an empty directory
        assert any("Permission denied" in n for n in notes), notes
        found = [p for p in stored.rglob("*") if p.is_file() and not p.is_symlink()
                 and (SECRET in p.read_bytes() or HIDDEN in p.read_bytes())]
        assert found == []
        # the harness's own root copies still read root files
        assert await sb.read_file("/opt/secret", user="root") == SECRET
    finally:
        await sb.stop()


async def test_exclude_globs_and_chunked_lists(local_backend: LocalBackend, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """busybox tar has no --exclude: find prunes the names, tar takes the list in chunks."""
    from agentmeter.sandbox import copyout
    monkeypatch.setattr(copyout, "ARGV_CHUNK_BYTES", 64)  # several tars, one stream
    sb = await local_backend.start(SandboxSpec())
    try:
        r = await sb.exec("mkdir -p w/node_modules/x w/src/.git w/-dash && echo 1 > w/src/a.py && "
                          "echo 2 > w/node_modules/x/b && echo 3 > w/src/.git/c && "
                          "echo 4 > w/-dash/d && for i in $(seq 20); do echo $i > w/f$i; done",
                          user="agent", cwd="/tmp")
        assert r.exit_code == 0, r.stderr
        notes = await sb.copy_out("/tmp/w", tmp_path / "out", exclude=("node_modules", ".git"))
        got = sorted(p.relative_to(tmp_path / "out").as_posix()
                     for p in (tmp_path / "out").rglob("*") if p.is_file())
        assert got == sorted(["-dash/d", "src/a.py", *(f"f{i}" for i in range(1, 21))]), notes
        assert notes == []
    finally:
        await sb.stop()


def test_only_a_static_busybox_is_used(tmp_path: Path) -> None:
    import shutil
    import sys

    from agentmeter.sandbox.hosttools import elf_interpreter, static_busybox
    assert elf_interpreter(static_busybox()) is None  # installed on first need
    assert elf_interpreter(os.path.realpath(sys.executable))  # dynamic: asks for a loader
    script = tmp_path / "busybox"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(SandboxError, match="not an ELF"):
        elf_interpreter(str(script))
    assert shutil.which("busybox") is not None
