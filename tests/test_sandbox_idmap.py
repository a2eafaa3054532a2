"""The shifted id range of root-run local sandboxes: the one-time ownership shift of a tree and
the refusal to share the range with host accounts."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentmeter.sandbox import idmap
from agentmeter.sandbox.spec import SandboxError

B = idmap.SHIFT_BASE


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to other ids needs root")
def test_shift_tree_moves_owners_keeps_special_bits_and_links(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    (root / "usr" / "bin").mkdir(parents=True)
    su = root / "usr" / "bin" / "su"
    su.write_text("#!/bin/sh\n")
    os.chmod(su, 0o4755)
    wall = root / "usr" / "bin" / "wall"
    wall.write_text("")
    os.chown(wall, 0, 5)
    os.chmod(wall, 0o2755)
    home = root / "home"
    home.mkdir()
    os.chown(home, 1000, 1000)
    (root / "bin").symlink_to("usr/bin")
    outside = tmp_path / "outside"
    outside.write_text("")
    (root / "escape").symlink_to(outside)

    n = idmap.shift_tree(root)
    assert n == 8
    assert (su.stat().st_uid, su.stat().st_gid, stat.S_IMODE(su.stat().st_mode)) == (B, B, 0o4755)
    assert (wall.stat().st_gid, stat.S_IMODE(wall.stat().st_mode)) == (B + 5, 0o2755)
    assert home.stat().st_uid == B + 1000
    assert os.lstat(root / "bin").st_uid == B and os.readlink(root / "bin") == "usr/bin"
    assert outside.stat().st_uid == 0  # a symlink's target outside the tree is never touched
    assert idmap.shift_tree(root) == 8 and su.stat().st_uid == B  # idempotent


def test_ids_outside_the_mappable_range_are_refused() -> None:
    assert idmap.shifted(65534) == B + 65534
    assert idmap.shifted(B + 7) == B + 7
    with pytest.raises(SandboxError, match="cannot be mapped"):
        idmap.shifted(100000)


def test_range_used_by_a_host_account_is_refused(tmp_path: Path) -> None:
    (tmp_path / "passwd").write_text(f"root:x:0:0::/root:/bin/sh\nsneaky:x:{B + 1000}:100::/:/bin/sh\n")
    (tmp_path / "group").write_text("root:x:0:\n")
    with pytest.raises(SandboxError, match=r"passwd: sneaky use ids in"):
        idmap.check_range_free(tmp_path)
    (tmp_path / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (tmp_path / "subuid").write_text(f"alice:{B - 10}:65536\n")
    with pytest.raises(SandboxError, match=r"subuid: alice"):
        idmap.check_range_free(tmp_path)
    (tmp_path / "subuid").write_text("alice:100000:65536\n")
    idmap.check_range_free(tmp_path)
    idmap.check_range_free()  # this host


def test_session_notice_filter_drops_only_keyctls_notice() -> None:
    from agentmeter.sandbox.masks import SessionNoticeFilter

    f = SessionNoticeFilter(1000)
    for chunk in (b"Joined sess", b"ion keyring: 12345\nreal ", b"error\n"):
        f.feed(chunk)
    assert f.text() == "real error\n"
    f = SessionNoticeFilter(1000)
    f.feed(b"Joined session keyring: 1\n")
    assert f.text() == ""
    f = SessionNoticeFilter(1000)
    f.feed(b"Joined")  # the command's own output, never finished by a newline
    assert f.text() == "Joined"
    f = SessionNoticeFilter(1000)
    f.feed(b"bash: x: command not found\nJoined session keyring: 1\n")
    assert f.text() == "bash: x: command not found\nJoined session keyring: 1\n"
