"""The local backend's workdir diff never walks the host's tree through the image's links
(security review finding 7: an image with ``RUN ln -s / /w`` and ``WORKDIR /w/tmp`` had the
host's /tmp snapshotted and diffed; a root process of the sandbox could also swap a directory
for a link while the host walks). Unit level: a directory stands for the sandbox's root."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agentmeter.sandbox import fsdiff, fsnames
from agentmeter.sandbox.inroot import resolve_in_root
from agentmeter.sandbox.local import LocalSandbox


def _host(tmp_path: Path) -> Path:
    """A host directory the sandbox must never show: it holds ``marker``."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "marker").write_text("host\n")
    return host


def test_the_workdir_is_resolved_below_the_sandbox_root(tmp_path: Path) -> None:
    host = _host(tmp_path)
    merged = tmp_path / "merged"
    (merged / "tmp").mkdir(parents=True)
    (merged / "w").symlink_to("/")
    (merged / "up").symlink_to("../../../../..")
    (merged / "h").symlink_to(host)  # absolute: the sandbox's own path of that name
    fake: Any = SimpleNamespace(merged=str(merged))
    assert LocalSandbox._host_view(fake, "/w/tmp") == str(merged / "tmp")
    assert resolve_in_root(str(merged), "/up/tmp") == str(merged / "tmp")
    assert not Path(resolve_in_root(str(merged), "/h")).is_relative_to(host)


def test_a_directory_swapped_for_a_link_during_the_walk_is_not_entered(tmp_path: Path) -> None:
    host = _host(tmp_path)
    (host / "b").mkdir()
    (host / "b" / "marker").write_text("host\n")
    top = tmp_path / "work"
    (top / "a" / "b").mkdir(parents=True)
    seen = []
    for rel, _ in fsnames.scan(str(top), fsnames.Budget(), exact=True):
        seen.append(rel)
        if rel == "a/b":  # listed as a directory; now the sandbox swaps its parent
            (top / "a").rename(top / "a.old")
            (top / "a").symlink_to(host)
    assert "a/b" in seen and "a/b/marker" not in seen


def test_a_file_is_hashed_only_through_no_link(tmp_path: Path) -> None:
    host = _host(tmp_path)
    top = tmp_path / "work"
    top.mkdir()
    (top / "d").symlink_to(host)
    assert fsdiff._digest_file(str(top), "d/marker") is None
    (top / "f").write_text("x")
    assert fsdiff._digest_file(str(top), "f") is not None
    os.unlink(top / "d")
