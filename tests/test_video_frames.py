"""Video frames for the vision judge (issue 29 item 5): a video (the capture's recording or a
deliverable) is sampled to N frames with ffmpeg (installed by the host-tool installer), which the
vision prompt attaches after the screenshots; without ffmpeg the prompt says why."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentmeter.verify.judge import JudgeImage
from agentmeter.verify.rubric import frames, judging
from agentmeter.verify.rubric.checks import Deliverables
from agentmeter.verify.rubric.config import RubricItem

ITEM = RubricItem.model_validate({"id": "anim", "description": "the ball moves",
                                  "check": "vision_judge", "inputs": ["*.mp4"]})


def _video(path: Path) -> Path:
    """A 2-second 64x48 test pattern (ffmpeg's own lavfi source: no file read)."""
    assert frames.ensure_ffmpeg() is None
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                    "testsrc=duration=2:size=64x48:rate=10", "-pix_fmt", "yuv420p", str(path)],
                   check=True, timeout=60)
    return path


def test_a_video_is_sampled_and_its_frames_go_to_the_vision_judge(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    video = _video(site / "demo.mp4")
    got = frames.sample(video, tmp_path / "frames", n=3, label="demo.mp4")
    assert got.problem is None and len(got.paths) == 3
    assert got.times == [pytest.approx(1 / 3, abs=0.01), 1.0, pytest.approx(5 / 3, abs=0.01)]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in got.paths)
    inputs = judging.JudgeInputs(task_id="t", instruction="Animate.", deliverables=Deliverables(site),
                                 checks=[], videos=[("demo.mp4", video.stat().st_size)],
                                 frames=[got])
    _, user = judging.prompt("vision", [ITEM], inputs)
    images = [c for c in user.content if isinstance(c, JudgeImage)]
    assert [i.path for i in images] == got.paths
    text = user.content[0]
    assert isinstance(text, str) and "3 frames sampled from them attached" in text
    assert "demo_frame2.png" in text  # named, with its time, in the media block
    # the text judge gets no image
    _, text_user = judging.prompt("text", [], inputs)
    assert not [c for c in text_user.content if isinstance(c, JudgeImage)]


def test_without_ffmpeg_the_prompt_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setattr(frames, "TOOLS", {"agentmeter-no-such-ffmpeg": "agentmeter-no-such-pkg"})
    monkeypatch.setattr("agentmeter.sandbox.hosttools.can_install", lambda: False)
    got = frames.sample(tmp_path / "v.mp4", tmp_path / "frames")
    assert not got.paths and got.problem is not None and "not found" in got.problem
    not_video = tmp_path / "v.webm"
    not_video.write_text("not a video")
    monkeypatch.undo()
    bad = frames.sample(not_video, tmp_path / "frames")
    assert not bad.paths and bad.problem is not None and "no frames" in bad.problem
    inputs = judging.JudgeInputs(task_id="t", instruction="i", deliverables=Deliverables(tmp_path),
                                 checks=[], videos=[("v.webm", 11)], frames=[bad])
    _, user = judging.prompt("vision", [ITEM], inputs)
    assert isinstance(user.content[0], str) and "their frames not attached" in user.content[0]
    assert bad.problem in user.content[0].replace("\\\"", '"') or "ffprobe" in user.content[0]


def test_a_playlist_posing_as_a_video_reads_no_other_host_file(tmp_path: Path) -> None:
    """Security review finding 6: ffmpeg runs on the host; an agent's "demo.mp4" that is an HLS
    playlist naming another host file (another trial's recording) had its frames sampled."""
    host_file = _video(tmp_path / "other_trial.ts")
    fake = tmp_path / "site" / "demo.mp4"
    fake.parent.mkdir()
    fake.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2,\n{host_file}\n"
                    "#EXT-X-ENDLIST\n")
    got = frames.sample(fake, tmp_path / "frames", n=1)
    assert not got.paths and got.problem is not None


def test_a_frame_larger_than_the_cap_is_not_decoded(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A huge frame in a tiny file (8192x8192 PNG in Matroska: 456 MB of ffmpeg) is refused:
    here the cap is lowered below the 64x48 test video's frame."""
    video = _video(tmp_path / "demo.mp4")
    monkeypatch.setattr(frames, "MAX_PIXELS", 64 * 48 - 1)
    got = frames.sample(video, tmp_path / "frames", n=1)
    assert not got.paths and got.problem is not None


def test_ffmpeg_runs_under_a_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    video = _video(tmp_path / "demo.mp4")
    monkeypatch.setattr(frames, "MEMORY_LIMIT", 8 << 20)  # too little for ffmpeg to start
    got = frames.sample(video, tmp_path / "frames", n=1)
    assert not got.paths and got.problem is not None
