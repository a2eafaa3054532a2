"""Two trials' media never share a copy in the report's media directory (security review
finding 11: trial ids a_b:c:0 and a:b_c:0 mapped to one directory, one trial's screenshot shown
for the other's)."""

from __future__ import annotations

from pathlib import Path

from agentmeter.report.html import _file_links


def test_trial_ids_that_differ_only_in_unsafe_characters_keep_their_own_media(
        tmp_path: Path) -> None:
    base = tmp_path / "report"
    base.mkdir()
    link = _file_links(base, base / "media")
    got = {}
    for trial_id in ("a_b:c:0", "a:b_c:0"):
        shot = tmp_path / trial_id.replace(":", "=") / "shot.png"
        shot.parent.mkdir()
        shot.write_bytes(trial_id.encode())
        got[trial_id] = link("20261129-000000-abcd", trial_id, 0, "screenshots/shot.png", shot)
    assert len(set(got.values())) == 2
    for trial_id, rel in got.items():
        assert (base / rel).read_bytes() == trial_id.encode()
