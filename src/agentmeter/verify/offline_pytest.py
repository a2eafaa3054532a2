"""Offline verification for ``pytest``-kind tasks (Terminal-Bench v1 layout).

Their ``run-tests.sh`` scripts usually download tooling at verification time (``curl … uv
install.sh | sh``, ``uv venv``, ``uv pip install pytest``, ``pip install pytest``). Sandboxes have
no network, so the harness provides pytest itself: a read-only directory with pytest's pure-Python
packages (copied once from the harness's own environment) and small shims for ``uv``, ``pip``,
``curl``, ``wget``, ``python`` and ``pytest`` placed first on the verifier's PATH. Installs become
no-ops, ``uv run X`` runs X, and ``pytest`` is the provided one. The sandbox still needs a
``python3`` (a ``FROM python:*`` image is emulated with Debian's python3; see dockerfile.py).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
from pathlib import Path

from agentmeter.paths import cache_dir
from agentmeter.sandbox.rootfs import file_lock
from agentmeter.sandbox.spec import Mount

MOUNT_POINT = "/opt/agentmeter-verify"
PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")
DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments")

_SHIMS = {
    "python": '#!/bin/sh\nexec python3 "$@"\n',
    "pytest": '#!/bin/sh\nexec python3 -m pytest "$@"\n',
    "pip": '#!/bin/sh\ncase "$1" in install|download) echo "agentmeter: \'pip $1\' skipped '
           '(offline verification; pytest is provided)" >&2; exit 0;; esac\n'
           'exec python3 -m pip "$@"\n',
    "uv": r"""#!/bin/bash
# agentmeter offline uv: installs are no-ops, 'uv run X' runs X
sub="$1"; shift || true
case "$sub" in
  run)
    while [ $# -gt 0 ]; do
      case "$1" in
        --with|-w|--python|-p|--project|--directory|--group|--extra) shift 2;;
        --) shift; break;;
        -*) shift;;
        *) break;;
      esac
    done
    exec "$@";;
  venv)
    d="${1:-.venv}"; case "$d" in -*) d=.venv;; esac
    mkdir -p "$d/bin" && : > "$d/bin/activate"; exit 0;;
  *) echo "agentmeter: 'uv $sub' skipped (offline verification; pytest is provided)" >&2; exit 0;;
esac
""",
    "curl": '#!/bin/sh\necho "agentmeter: curl is offline during verification" >&2\nexit 0\n',
    "wget": '#!/bin/sh\necho "agentmeter: wget is offline during verification" >&2\nexit 0\n',
}
_SHIMS["pip3"] = _SHIMS["pip"]


def toolkit_dir() -> Path:
    """The cached toolkit directory (built on first use)."""
    version = importlib.metadata.version("pytest")
    root = cache_dir() / "verifier-tools" / f"pytest-{version}-v3"
    if (root / ".done").exists():
        return root
    with file_lock(root.parent / ".lock"):
        if (root / ".done").exists():
            return root
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        spec = importlib.util.find_spec("pytest")  # located, not imported
        assert spec is not None and spec.origin is not None, "pytest is a dependency"
        site_packages = Path(spec.origin).resolve().parent.parent
        for name in PACKAGES:
            src = site_packages / name
            if src.is_dir():
                shutil.copytree(src, tmp / "site" / name,
                                ignore=shutil.ignore_patterns("__pycache__"))
            elif src.is_file():
                (tmp / "site").mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, tmp / "site" / name)
        # pytest reads its own and its plugins' metadata (importlib.metadata) at start-up
        for dist in DISTRIBUTIONS:
            try:
                info = Path(str(importlib.metadata.distribution(dist)._path))  # type: ignore[attr-defined]
            except importlib.metadata.PackageNotFoundError:
                continue
            if info.is_dir():
                shutil.copytree(info, tmp / "site" / info.name)
        (tmp / "bin").mkdir(parents=True)
        for name, text in _SHIMS.items():
            (tmp / "bin" / name).write_text(text)
            (tmp / "bin" / name).chmod(0o755)
        (tmp / ".done").write_text("")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return root


def toolkit_mount() -> Mount:
    return Mount(source=toolkit_dir(), target=MOUNT_POINT, read_only=True)


IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def verifier_env(image_path: str | None = None) -> dict[str, str]:
    """The verifier's environment: the harness's tools first on PATH, then the image's PATH
    (its ``ENV PATH``; Docker's default when it sets none)."""
    return {
        "PATH": f"{MOUNT_POINT}/bin:{image_path or IMAGE_PATH}",
        "PYTHONPATH": f"{MOUNT_POINT}/site",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PIP_NO_INDEX": "1",
    }


#: run before the verifier so ``source $HOME/.local/bin/env`` (uv's installer) works
PREPARE_HOME = "mkdir -p \"$HOME/.local/bin\" && touch \"$HOME/.local/bin/env\""
