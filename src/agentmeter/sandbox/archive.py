"""Safe extraction of tar streams that came out of a sandbox (copy_out)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def extract_safely(data: bytes, dest: Path) -> list[str]:
    """Extract ``data`` into ``dest``. Members that would land or point outside ``dest``
    (absolute or escaping links, device files, ``..`` paths) are skipped, not followed;
    returns their names."""
    skipped: list[str] = []
    dest.mkdir(parents=True, exist_ok=True)

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError:
            skipped.append(member.name)
            return None

    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter=keep)
    return skipped
