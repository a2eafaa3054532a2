"""Browser capture in an evaluation sandbox (design14 §4; AgencyBench spec §3.4–3.5).

``capture`` starts a fresh local bubblewrap sandbox (base ``host``, network ``none``), copies
the deliverables in, and runs ``driver.py`` there with the host's Python: it serves them from
``python -m http.server`` on 127.0.0.1, drives Debian's Chromium headless through the plan
with Playwright and writes screenshots, the video and ``capture_diagnostics.json``, which are
copied back to ``out``. What the page does (never loading, an action failing, looping forever,
reaching for the network) ends up in the diagnostics; only harness faults raise CaptureError.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentmeter.sandbox.hosttools import ensure_tools
from agentmeter.sandbox.protocol import Sandbox
from agentmeter.sandbox.registry import make_backend
from agentmeter.sandbox.spec import HARNESS_ENV, Limits, Mount, SandboxError, SandboxSpec
from agentmeter.verify.browser.driver import CLOSE_GRACE_S, DIAGNOSTICS
from agentmeter.verify.browser.plan import CapturePlan

#: what the capture needs on the host (command -> Debian package)
BROWSER_TOOLS = {"chromium": "chromium"}
#: Playwright's video recorder pipes frames to ffmpeg; Debian's is linked where it looks
VIDEO_TOOLS = {"ffmpeg": "ffmpeg"}
#: where things live inside the evaluation sandbox
ROOT = "/capture"
SITE = f"{ROOT}/site"
OUT = f"{ROOT}/out"
#: the page's port on the sandbox's own loopback (the released protocol draws 28080-29999;
#: each sandbox has its own network namespace, so one fixed port never collides)
PORT = 28080
#: Chromium is several processes and threads; the disk is a tmpfs counted in the memory
LIMITS = Limits(memory_mb=3072, pids=2048, disk_mb=1024)
#: deliverables larger than this are not copied (recorded in the diagnostics)
MAX_SITE_BYTES = 256 * 1024 * 1024
#: beyond the budget: the driver's own close grace plus process start
_EXEC_SLACK_S = CLOSE_GRACE_S + 10.0


class CaptureError(Exception):
    """The capture could not be run (a harness fault: no sandbox, no Chromium, a driver bug)."""


class CaptureResult(BaseModel):
    screenshots: list[Path]
    video: Path | None
    diagnostics: dict[str, Any]
    diagnostics_path: Path

    @property
    def timed_out(self) -> bool:
        return bool(self.diagnostics.get("timed_out"))

    @property
    def labels(self) -> dict[str, Any]:
        labels: dict[str, Any] = self.diagnostics.get("labels") or {}
        return labels


def _python_mounts() -> tuple[Mount, ...]:
    """The host Python and the directory Playwright is installed in, read-only at their own
    paths (the ``host`` base shows /usr, /etc and /opt already)."""
    import playwright

    dirs = {Path(sys.prefix), Path(sys.base_prefix), Path(playwright.__file__).parent.parent}
    visible = ("/usr", "/etc", "/opt")
    need = sorted(d.resolve() for d in dirs if not str(d.resolve()).startswith(visible))
    top = [d for d in need if not any(p != d and d.is_relative_to(p) for p in need)]
    return tuple(Mount(source=d, target=str(d), read_only=True) for d in top)


def _tree_bytes(site: Path) -> int:
    return sum(p.lstat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())


def _fallback(plan: CapturePlan, error: str, timed_out: bool) -> dict[str, Any]:
    """Diagnostics when the driver left none."""
    return {"title": None, "url": None, "html_head": None, "labels": {}, "errors": [error],
            "timed_out": timed_out, "screenshots": [], "video": None, "video_note": None,
            "viewport": list(plan.viewport), "timings": {}, "harness_error": None}


async def capture(site: Path, plan: CapturePlan, out: Path, *, timeout_s: float) -> CaptureResult:
    """Open ``plan.page`` of the deliverables ``site`` in Chromium, run the plan, and leave the
    screenshots, the video and ``capture_diagnostics.json`` in ``out``. The budget is the
    smaller of ``timeout_s`` and the plan's ``timeout_sec``, sandbox start included; closing
    the browser and copying out may take up to ~20 s more."""
    t_start = time.monotonic()
    if not site.is_dir():
        raise CaptureError(f"capture: the deliverables directory {site} does not exist")
    out.mkdir(parents=True, exist_ok=True)
    budget = min(timeout_s, plan.timeout_sec)
    # installed with apt on first need when running as root (minutes: off the event loop)
    try:
        await asyncio.to_thread(ensure_tools, BROWSER_TOOLS, "the browser capture")
        mounts = _python_mounts()
    except SandboxError as e:
        raise CaptureError(str(e)) from None
    except ImportError as e:
        raise CaptureError(f"the browser capture needs the Python package playwright: {e}") from None
    ffmpeg: str | None = None
    video_note: str | None = None
    if plan.video:
        try:
            await asyncio.to_thread(ensure_tools, VIDEO_TOOLS, "the browser capture's video")
            ffmpeg = shutil.which("ffmpeg")
        except SandboxError as e:
            video_note = f"video skipped: {e}"
    page = site / plan.page
    if not page.resolve().is_file() or not page.resolve().is_relative_to(site.resolve()):
        # nothing to load: said at once (no browser waits out its budget on a 404)
        return _finish(out, _fallback(plan, f"{plan.page} is not among the deliverables: "
                                            "nothing to load", False), {})
    size = _tree_bytes(site)
    if size > MAX_SITE_BYTES:
        diag = _fallback(plan, f"the deliverables are {size} bytes, over the capture's "
                               f"{MAX_SITE_BYTES} byte limit: not captured", False)
        return _finish(out, diag, {})

    spec = SandboxSpec(base="host", network="none", limits=LIMITS, mounts=mounts,
                       workdir=ROOT, hostname="capture")
    timings: dict[str, float] = {}
    try:
        sandbox = await make_backend("local").start(spec)
    except SandboxError as e:
        raise CaptureError(f"capture: the evaluation sandbox did not start: {e}") from None
    timings["sandbox_start_s"] = time.monotonic() - t_start
    try:
        diag = await _run(sandbox, site, plan, out, budget - (time.monotonic() - t_start),
                          budget, ffmpeg, timings)
    except SandboxError as e:
        raise CaptureError(f"capture: {e}") from None
    finally:
        await sandbox.stop()
    if video_note and not diag.get("video_note"):
        diag["video_note"] = video_note
    timings["total_s"] = time.monotonic() - t_start
    return _finish(out, diag, timings)


async def _run(sb: Sandbox, site: Path, plan: CapturePlan, out: Path, budget_s: float,
               total_budget_s: float, ffmpeg: str | None,
               timings: dict[str, float]) -> dict[str, Any]:
    t0 = time.monotonic()
    await sb.copy_in(site, SITE)
    await sb.write_file(f"{ROOT}/plan.json", plan.model_dump_json())
    driver = Path(__file__).with_name("driver.py").read_text()
    await sb.write_file(f"{ROOT}/driver.py", driver)
    mk = await sb.exec(["mkdir", "-p", OUT], user="root", cwd="/", env=HARNESS_ENV)
    if not mk.ok:
        raise CaptureError(f"capture: mkdir {OUT} failed: {mk.stderr.strip()}")
    timings["copy_in_s"] = time.monotonic() - t0
    budget_s = max(budget_s, 0.1)
    t0 = time.monotonic()
    import playwright

    env = {"HOME": f"{ROOT}/home", "TMPDIR": "/tmp",
           "PYTHONPATH": str(Path(playwright.__file__).parent.parent), "PYTHONDONTWRITEBYTECODE": "1"}
    r = await sb.exec([sys.executable, f"{ROOT}/driver.py", f"{ROOT}/plan.json", SITE, OUT,
                       f"{budget_s:.3f}", str(PORT), ffmpeg or "", f"{total_budget_s:g}"],
                      user="root", cwd=ROOT, env=env, timeout=budget_s + _EXEC_SLACK_S)
    timings["driver_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix="capture-", dir=out))
    try:
        await sb.copy_out(OUT, staging, user="root")  # the driver's (root) output
        diag = _read_diagnostics(staging / DIAGNOSTICS)
        if r.timed_out or r.exit_code >= 128:  # the driver itself wedged or was killed
            why = (f"timed out: the capture driver did not finish within {budget_s:.1f} s + "
                   f"{_EXEC_SLACK_S:g} s and was killed" if r.timed_out
                   else f"the capture driver was killed (exit {r.exit_code})")
            if diag is None:
                diag = _fallback(plan, why, r.timed_out)
            else:
                diag["errors"].append(why)
                diag["timed_out"] = diag["timed_out"] or r.timed_out
            diag["screenshots"], diag["video"] = [], None
        elif diag is None or r.exit_code != 0:
            detail = (diag or {}).get("harness_error") or r.stderr.strip()[-2000:]
            raise CaptureError(f"capture driver failed (exit {r.exit_code}): {detail}")
        for name in [*diag["screenshots"], *([diag["video"]] if diag["video"] else [])]:
            if (staging / name).is_file():
                (staging / name).replace(out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    timings["copy_out_s"] = time.monotonic() - t0
    return diag


def _read_diagnostics(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _finish(out: Path, diag: dict[str, Any], timings: dict[str, float]) -> CaptureResult:
    diag.setdefault("timings", {}).update({k: round(v, 4) for k, v in timings.items()})
    if diag.get("timed_out"):
        diag["screenshots"], diag["video"] = [], None
    shots = [out / n for n in diag.get("screenshots", []) if (out / n).is_file()]
    video = out / diag["video"] if diag.get("video") and (out / diag["video"]).is_file() else None
    diag["screenshots"] = [p.name for p in shots]
    diag["video"] = video.name if video else None
    path = out / DIAGNOSTICS
    path.write_text(json.dumps(diag, indent=1, ensure_ascii=False))
    return CaptureResult(screenshots=shots, video=video, diagnostics=diag, diagnostics_path=path)
