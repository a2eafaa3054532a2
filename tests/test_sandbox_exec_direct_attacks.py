"""White-box attacks on the exec without bwrap (zygote_direct.py): what its init does as host
root while a concurrent exec of the same sandbox changes the (writable) tree, and what a
command can reach of its init."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from agentmeter.sandbox import zygote
from agentmeter.sandbox.local import LocalBackend
from agentmeter.sandbox.masks import proc_mask_list
from agentmeter.sandbox.spec import Mount, SandboxSpec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the zygote serves root-run sandboxes")

#: flips the tree's /proc symlink between p0 and p1 as fast as it can
FLIP = 'while (1) { $i ^= 1; symlink("p$i", "/px"); rename("/px", "/proc") }'
#: where the command's proc and its masks are mounted (both candidates read: /proc itself flips)
WHERE = ("cat /p0/self/mountinfo /p1/self/mountinfo 2>/dev/null "
         "| awk '$5 ~ /^\\/p[01](\\/|$)/ {print $5}' | sort -u | tr '\\n' ' '")


async def test_a_concurrent_exec_turning_the_image_s_proc_symlink_leaves_the_masks_on_proc(
        local_backend: LocalBackend) -> None:
    """An image whose /proc is a symlink (p0), and a running exec of the sandbox turning it
    between p0 and p1 (a directory with every masked name) while other execs start: each
    exec's init mounts its proc where /proc points, then its masks: they must land on that
    proc (resolved beneath its own mount), not where /proc points by then (the exec's proc
    unmasked); and the init's own /proc/self/stat is the host's, not the tree's (which the
    flip made a missing file: the exec failed to start)."""
    sb = await local_backend.start(SandboxSpec())
    try:
        assert isinstance(sb._keeper, zygote.Keeper) and sb._keeper.direct
        fakes = " ".join(f"p1/{name}" for how, name in proc_mask_list() if how != "null")
        files = " ".join(f"p1/{name}" for how, name in proc_mask_list() if how == "null")
        subprocess.run(["nsenter", f"--mount=/proc/{sb._keeper.pid}/ns/mnt", "sh", "-ec",
                        f"cd {sb._tree}; rmdir proc; mkdir -p p0 {fakes}; touch {files}; "
                        "ln -s p0 proc"], check=True)
        await sb.exec("true")  # the exec made ahead may have seen the tree mid-change
        n = len(proc_mask_list())
        flip = asyncio.ensure_future(sb.exec(["/usr/bin/perl", "-e", FLIP], user="root"))
        try:
            await asyncio.sleep(0.3)
            assert not flip.done(), flip.result()
            for _ in range(30):
                r = await sb.exec(WHERE, user="agent")
                assert r.exit_code == 0 and r.stderr == "", r
                mounts = r.stdout.split()
                assert len(mounts) == n + 1, r.stdout  # the proc, then its masks beneath it
                assert all(m.startswith(mounts[0] + "/") for m in mounts[1:]), r.stdout
        finally:
            flip.cancel()
            with contextlib.suppress(BaseException):
                await flip
    finally:
        await sb.stop()


#: a root command reading every readable mapping of its init's memory for the marker
READ_INIT = r'''
open(M, "<", "/proc/1/maps") or die "maps: $!\n";
open(F, "<", "/proc/1/mem") or die "mem: $!\n";
my %h;
while (<M>) {
    my ($a, $b, $p) = /^([0-9a-f]+)-([0-9a-f]+) (\S+)/;
    next unless $p =~ /^r/ and hex($b) - hex($a) < (1 << 28);
    seek(F, hex($a), 0) or next;
    my $buf;
    sysread(F, $buf, hex($b) - hex($a)) or next;
    $h{$1}++ while $buf =~ /(am-secret-marker-\d+)/g;
}
print join(" ", sort keys %h), "\n";
'''


async def test_a_root_command_reads_nothing_of_its_init_s_memory(local_backend: LocalBackend) -> None:
    """The exec's init is a fork of the keeper (which is the zygote's): its memory holds the
    keeper's earlier requests, their environments among them (a grader's key). A root command
    has the init's ids and capabilities, so a dumpable init's /proc/1/mem was its to read
    (and write): the init is never dumpable, and /proc/1/maps and mem are refused."""
    marker = f"am-secret-marker-{os.getpid()}"
    sb = await local_backend.start(SandboxSpec())
    try:
        await sb.exec("true", user="root", env={"GRADER_KEY": marker})
        r = await sb.exec(["/usr/bin/perl", "-e", READ_INIT], user="root")
    finally:
        await sb.stop()
    assert marker not in r.stdout, r
    assert r.exit_code != 0 and "maps: Permission denied" in r.stderr, r


#: turns /srv/am (the parent of the task mounts' targets, made by the keeper: a directory of the
#: overlay's upper layer, which may be renamed) into a symlink flipping between the real
#: directory (m0) and a decoy (m1) with the same targets
FLIP_PARENT = ('chdir "/srv" or die; rename("am", "m0") or die "rename: $!"; mkdir "m1"; '
               'mkdir "m1/outer"; mkdir "m1/outer/inner"; symlink("m0", "am"); '
               'while (1) { $i ^= 1; symlink("m$i", "x"); rename("x", "am") }')


async def test_a_concurrent_exec_turning_a_target_s_parent_leaves_nested_mounts_nested(
        local_backend: LocalBackend, tmp_path: Path) -> None:
    """Two task mounts, one inside the other (a read-only cover over a part of a writable
    directory), and a running exec turning their targets' parent between the real directory
    and a decoy while other execs start: the inner mount must land on the outer one (resolved
    beneath it), not on the decoy (the outer's covered part shown, writable)."""
    outer, inner = tmp_path / "outer", tmp_path / "inner"
    (outer / "inner").mkdir(parents=True)
    inner.mkdir()
    for d in (tmp_path, outer, outer / "inner", inner):
        d.chmod(0o755)
    spec = SandboxSpec(mounts=(Mount(source=outer, target="/srv/am/outer", read_only=False),
                               Mount(source=inner, target="/srv/am/outer/inner", read_only=True)))
    sb = await local_backend.start(spec)
    try:
        flip = asyncio.ensure_future(sb.exec(["/usr/bin/perl", "-e", FLIP_PARENT], user="root"))
        try:
            await asyncio.sleep(0.3)
            assert not flip.done(), flip.result()
            for _ in range(30):
                r = await sb.exec("awk '$5 ~ /outer/ {print $5}' /proc/self/mountinfo", user="agent")
                assert r.exit_code == 0 and r.stderr == "", r
                mounts = r.stdout.split()
                assert len(mounts) == 2 and mounts[1] == mounts[0] + "/inner", r.stdout
        finally:
            flip.cancel()
            with contextlib.suppress(BaseException):
                await flip
    finally:
        await sb.stop()
