"""Interpreter droppings a host tree may hold that never go into a sandbox: Python's bytecode
caches (``__pycache__`` directories, ``*.pyc``/``*.pyo`` files). They are the host's, written
when something on the host imported the files, and differ between machines: copied into a
workspace they are files the task never had (a reference solution that counts files scores
less), and in a build context they would change layer cache keys from one host to the next.

Used by both backends' ``copy_in``, the docker backend's build contexts and the layer cache
keys (``layer_steps.py``, ``spec.LayerSpec.recipe_digest``). A leaf module: imports nothing of
agentmeter's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

#: directory names left out with everything below them
DIR_NAMES = frozenset({"__pycache__"})
#: file name endings left out
FILE_SUFFIXES = (".pyc", ".pyo")


def is_dropping(name: str) -> bool:
    """Whether a file or directory called ``name`` is left out."""
    return name in DIR_NAMES or name.endswith(FILE_SUFFIXES)


def under_dropping(rel: Path | str) -> bool:
    """Whether the relative path ``rel`` is a dropping or inside one."""
    return any(is_dropping(part) for part in Path(rel).parts)


def walk(top: Path) -> list[Path]:
    """Every path below the directory ``top`` (sorted, like ``sorted(top.rglob("*"))``) except
    droppings and what is inside them."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(top):
        keep = [d for d in dirnames if not is_dropping(d)]
        dirnames[:] = keep
        base = Path(dirpath)
        # symlinks to directories are among dirnames: listed (as rglob does), not followed
        out.extend(base / n for n in (*keep, *filenames) if not is_dropping(n))
    return sorted(out)


def tar_filter(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """A ``tarfile.add`` filter leaving droppings (and, for a directory, what is in it) out."""
    return None if under_dropping(ti.name) else ti


def ignore(_dir: str, names: Iterable[str]) -> set[str]:
    """A ``shutil.copytree`` ``ignore`` leaving droppings out."""
    return {n for n in names if is_dropping(n)}


def contains(top: Path) -> bool:
    """Whether the directory ``top`` holds a dropping anywhere."""
    for _dirpath, dirnames, filenames in os.walk(top):
        if any(is_dropping(n) for n in (*dirnames, *filenames)):
            return True
    return False


@contextlib.contextmanager
def clean_tree(top: Path) -> Iterator[Path]:
    """``top`` itself when it holds no droppings, else a temporary copy without them (removed
    on exit). Symlinks are copied as symlinks."""
    if not contains(top):
        yield top
        return
    with tempfile.TemporaryDirectory(prefix="agentmeter-clean-") as tmp:
        copy = Path(tmp) / top.name
        shutil.copytree(top, copy, symlinks=True, ignore=ignore)
        yield copy
