"""A wide tree in a copied-out stream exhausts neither the runner's descriptors nor its disk
(security review finding 5: ~100,000 directories in /logs/artifacts, which the agent can write
and the trial always collects, held one open descriptor each until the end of the extraction,
and each took a 4 KiB block while the byte cap counted only file data)."""

from __future__ import annotations

import io
import os
import resource
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmeter.sandbox import untar
from agentmeter.sandbox.archive import CopyTooLarge


def _wide(n: int) -> io.BytesIO:
    """``top/`` holding ``n`` directories, then a file in each, in the opposite order (so every
    directory is needed again after many others)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for name in ["top", *(f"top/d{i}" for i in range(n))]:
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(ti)
        for i in reversed(range(n)):
            ti = tarfile.TarInfo(f"top/d{i}/f")
            ti.size = 1
            tar.addfile(ti, io.BytesIO(b"x"))
    buf.seek(0)
    return buf


@pytest.fixture
def few_fds() -> Iterator[None]:
    """This process may open only 100 more descriptors than it has."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 100, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_wide_tree_keeps_few_descriptors_open(tmp_path: Path, few_fds: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(untar, "MAX_OPEN_DIRS", 16)
    n = 600
    res = untar.extract(_wide(n), tmp_path / "out", what="t", max_bytes=64 << 20, top="top")
    assert res.notes == [] and res.files == n
    assert all((tmp_path / "out" / f"d{i}" / "f").read_bytes() == b"x" for i in range(n))


def test_directories_count_against_the_byte_cap(tmp_path: Path) -> None:
    stream = _wide(300)  # about 300 KiB of headers, no data to speak of; 1.2 MiB of blocks
    with pytest.raises(CopyTooLarge):
        untar.extract(stream, tmp_path / "out", what="t", max_bytes=1 << 20, top="top")
    assert not (tmp_path / "out").exists()
