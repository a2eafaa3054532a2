"""Frames of a video for the vision judge (AgencyBench: the judge sees the recorded run, not only
its screenshots): ``N`` frames sampled evenly over the video's length with ffmpeg, installed
through the host-tool installer (``sandbox/hosttools.py``) when it is missing. When frames
cannot be had (no ffmpeg and no way to install it, an unreadable video, a time-out) the reason
is returned, and the judge's prompt says it beside the video's name.

The video is the capture's recording or a deliverable named by a vision item's ``inputs``
(``VIDEO_TYPES``). ffmpeg runs on the host, on a file copied out of the sandbox, under a time
limit, its output frames scaled to at most ``MAX_WIDTH`` pixels wide. The file is the agent's:
ffmpeg and ffprobe read it only as one of the container formats ``FORMATS`` (an HLS playlist
named ``demo.mp4`` made ffmpeg read other host files it named), through the ``file`` protocol,
decode at most ``MAX_PIXELS`` a frame and run with ``MEMORY_LIMIT`` bytes of address space (set
by util-linux's ``prlimit`` before ffmpeg starts, not by Python code run in the forked child: the
harness has threads, and a ``preexec_fn`` may deadlock there).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

#: video files a vision item's inputs may name
VIDEO_TYPES = (".mp4", ".webm", ".mov", ".mkv", ".avi", ".m4v", ".ogv")
#: frames per video (the prompt's images stay few)
DEFAULT_FRAMES = 4
MAX_WIDTH = 1280
TIMEOUT_S = 60.0
TOOLS = {"ffmpeg": "ffmpeg", "ffprobe": "ffmpeg"}
#: the demuxers a video may be read with (no playlist, concat or image-sequence format, which
#: would open other files by the names inside it)
FORMATS = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,ogg"
MAX_PIXELS = 16_777_216
MEMORY_LIMIT = 2 << 30


def _input_options() -> list[str]:
    """Before ``-i``: what confines the agent's file (formats, protocol, frame size)."""
    return ["-format_whitelist", FORMATS, "-protocol_whitelist", "file",
            "-max_pixels", str(MAX_PIXELS), "-threads", "2"]


def _limited(argv: list[str]) -> list[str]:
    """``argv`` run with at most ``MEMORY_LIMIT`` bytes of address space."""
    return ["prlimit", f"--as={MEMORY_LIMIT}", "--", *argv]


@dataclass
class Frames:
    """The frames sampled from one video, or why there are none."""

    video: str
    paths: list[Path] = field(default_factory=list)
    #: seconds into the video, one per frame
    times: list[float] = field(default_factory=list)
    problem: str | None = None


def is_video(name: str) -> bool:
    return name.lower().endswith(VIDEO_TYPES)


def ensure_ffmpeg() -> str | None:
    """None when ffmpeg and ffprobe can be run (installing them if this process may), else why
    not."""
    from agentmeter.sandbox.hosttools import ensure_tools
    from agentmeter.sandbox.spec import SandboxError

    try:
        ensure_tools(TOOLS, "video frames for the vision judge", log=None)
    except SandboxError as e:
        return str(e).splitlines()[0]
    return None


def duration(video: Path, timeout: float = TIMEOUT_S) -> float | None:
    r = subprocess.run(_limited(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                                 "-of", "default=noprint_wrappers=1:nokey=1", *_input_options(),
                                 "-i", str(video)]),
                       capture_output=True, text=True, timeout=timeout, check=False,
                       stdin=subprocess.DEVNULL)
    try:
        value = float(r.stdout.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None
    return value if value > 0 else None


def sample(video: Path, out_dir: Path, n: int = DEFAULT_FRAMES, label: str | None = None,
           timeout: float = TIMEOUT_S) -> Frames:
    """``n`` PNG frames of ``video`` in ``out_dir`` (``<stem>_frame<k>.png``), at the middles
    of ``n`` equal spans of its length."""
    got = Frames(video=label or video.name)
    problem = ensure_ffmpeg()
    if problem is not None:
        got.problem = f"no frames: {problem}"
        return got
    try:
        length = duration(video, timeout)
        if length is None:
            got.problem = "no frames: ffprobe found no duration (not a readable video)"
            return got
        out_dir.mkdir(parents=True, exist_ok=True)
        for k in range(n):
            t = round(length * (k + 0.5) / n, 3)
            out = out_dir / f"{video.stem}_frame{k + 1}.png"
            r = subprocess.run(_limited(["ffmpeg", "-nostdin", "-v", "error", "-y", "-ss", f"{t}",
                                         *_input_options(), "-i", str(video), "-frames:v", "1",
                                         "-vf", f"scale='min({MAX_WIDTH},iw)':-2", str(out)]),
                               capture_output=True, text=True, timeout=timeout, check=False)
            if r.returncode == 0 and out.is_file() and out.stat().st_size > 0:
                got.paths.append(out)
                got.times.append(t)
            elif not got.paths and k == n - 1:
                tail = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
                got.problem = f"no frames: ffmpeg exited {r.returncode}: {tail}"
    except subprocess.TimeoutExpired:
        got.problem = f"no frames: ffmpeg took more than {timeout:.0f}s"
    except OSError as e:
        got.problem = f"no frames: {e}"
    return got
