"""What an agent writes can fail its trial, never make it ``infra_invalid`` (which is retried and
left out of quality: the agent must not be able to choose it).

An agent fills its workdir and ``/logs/artifacts`` with hostile names and trees: invalid UTF-8,
newlines, control characters, U+202E, 255-byte names, a 1,500-deep directory, more files than
the listing caps, fifos, sockets, symlink loops. Every trial ends passed or failed as its
verifier says, and is stored; the names are stored escaped (sandbox/fsnames.py), reversibly.
The caps are lowered here so "more than the caps" stays fast."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from pg_fixtures import pg_url_fixture, postgres_url_fixture  # noqa: F401
from taskgen import make_task

from agentmeter.records import (
    AgentSpec,
    ArtifactRecord,
    ConfigRecord,
    ModelSpec,
    RunRecord,
    TrialRecord,
    TrialStatus,
)
from agentmeter.runner import artifacts as artifacts_mod
from agentmeter.runner.session import RunRequest, prepare, run
from agentmeter.sandbox import fsnames, untar
from agentmeter.sandbox.fsdiff import diff_host_tree, snapshot_host_tree
from agentmeter.store.db import Store
from agentmeter.store.schema import storable

#: the caps of the trial tests: the many files below cross them, the deep tree crosses depth
TEST_CAPS = fsnames.Caps(entries=400, depth=24, name_bytes=1 << 20)
TEST_MAX_FILES = 100
MANY = 500

HOSTILE_NAMES = [b"bad\xffname", b"new\nline", "rtl\u202egpj.exe".encode(), b"esc\x1b[31m\x01\x7f",
                 b"back\\slash", "sep\u2028x".encode(), b"\xff" * 255, b"a" * 255, b"tab\tcr\r"]

#: run as the agent in /app and in /logs/artifacts (perl-base is in every Debian image); $1: how
#: many empty files to make (past the lowered caps)
HOSTILE = r"""
hostile() {
  printf x > "$(printf 'bad\377name')"
  printf x > "$(printf 'new\nline')"
  printf x > "$(printf 'rtl\342\200\256gpj.exe')"
  printf x > "$(printf 'esc\033[31m\001\177')"
  printf x > 'back\slash'
  printf x > "$(printf 'sep\342\200\250x')"
  printf x > "$(printf 'tab\tcr\r')"
  printf x > "$(head -c 255 /dev/zero | tr '\0' '\377')"
  printf x > "$(head -c 255 /dev/zero | tr '\0' a)"
  mkfifo fifo
  perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Local => "sock", Listen => 1) or die "$!"'
  ln -s loop1 loop2; ln -s loop2 loop1; ln -s . self
  p="deep/$(printf 'd/%.0s' $(seq 1500))"; mkdir -p "$p"; printf x > "$p/leaf"
  mkdir many; [ "$1" = 0 ] || (cd many && seq 1 "$1" | xargs touch)
}
(cd /app && hostile @APP@) && (cd /logs/artifacts && hostile @ART@) || exit 1
"""


# --- names -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", HOSTILE_NAMES + [b"plain.txt", "café ü".encode(), b"\\x41",
                                                  b"\xed\xa0\x80", "emoji\U0001F600".encode()],
                         ids=lambda b: b[:16].hex())
def test_escaped_names_are_printable_text_and_round_trip(name: bytes) -> None:
    text = fsnames.escape_name(name)
    assert text.isprintable() and "\n" not in text and "\u202e" not in text
    text.encode("utf-8")  # valid: no surrogates
    assert fsnames.unescape_name(text) == name
    assert fsnames.escape_name(os.fsdecode(name)) == text


def test_escape_round_trips_random_bytes() -> None:
    rng = random.Random(24)
    for _ in range(2000):
        name = bytes(rng.choice([*range(1, 47), *range(48, 256)])
                     for _ in range(rng.randint(1, 40)))
        text = fsnames.escape_name(name)
        assert text.isprintable() and fsnames.unescape_name(text) == name
    assert fsnames.escape_path("a/new\nline/b\udcff\xff") == "a/new\\x0aline/b\\xffÿ"


def test_storable_escapes_nul_and_surrogates() -> None:
    bad = "x\x00y\udcffz\ud800"
    assert storable(bad) == "x\\x00y\\xffz\\ud800"
    assert storable({bad: [bad, (1, None)], "n": 2.5}) == \
        {storable(bad): [storable(bad), [1, None]], "n": 2.5}


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def test_trial_and_artifact_rows_with_nul_and_surrogates_are_stored_alike(
        db: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """PostgreSQL refuses NUL, SQLite's driver refuses surrogates: both store the same text."""
    bad = "x\x00y\udcffz\ud800"
    where = request.getfixturevalue("pg_url") if db == "postgres" else tmp_path
    with Store.open(where, runs_dir=tmp_path / "runs") as store:
        store.create_run(RunRecord(id="r"))
        store.upsert_config(ConfigRecord(id="c", label="c", model=ModelSpec(name="m"),
                                         agent=AgentSpec(name="a")), run_id="r")
        store.save_trial(TrialRecord(id="c:t:0", run_id="r", config_id="c", task_id="t",
                                     attempt=0, status=TrialStatus.FAILED, error=bad,
                                     tool_calls={bad: 1}, extra={"problems": [bad]}))
        store.add_artifact("r", ArtifactRecord(trial_id="c:t:0", name=bad, kind="other",
                                               relpath=bad, size=1))
        got = store.get_trial("r", "c:t:0")
        assert got is not None and got.status is TrialStatus.FAILED
        assert got.error == storable(bad) and got.tool_calls == {storable(bad): 1}
        assert got.extra["problems"] == [storable(bad)]
        assert [(a.name, a.relpath) for a in store.artifacts("r")] == [(storable(bad),) * 2]


# --- trees without recursion -------------------------------------------------------------

def _deep_tree(top: Path, depth: int) -> Path:
    """``top``/d/d/.../d (``depth`` levels) with a file at the bottom, made without long paths."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    return top


def test_deep_trees_are_listed_diffed_copied_and_removed_without_recursion(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert sys.getrecursionlimit() < 1500
    monkeypatch.setattr(fsnames, "CAPS", TEST_CAPS)
    top = _deep_tree(tmp_path / "deep", 1500)
    before = snapshot_host_tree(str(top), "/app", ())
    assert before.note and "deeper than 24" in before.note
    diff = diff_host_tree(str(top), before, ())
    assert diff.empty and len(diff.notes) == 2  # before and after: the same tree, cut the same
    budget = fsnames.Budget()
    assert fsnames.walk_files(str(top), budget) == [] and budget.too_deep == 1
    assert fsnames.prune_depth(str(top), TEST_CAPS.depth) == 1  # remove_tree: shutil overflows
    assert not (top / ("d/" * TEST_CAPS.depth)).exists() and (top / ("d/" * 23)).is_dir()
    # a tar stream of a deep tree (GNU tar's long names) is extracted cut at the caps
    tar = tmp_path / "deep.tar"
    _deep_tree(tmp_path / "deep3", 300)
    subprocess.run(["tar", "-cf", str(tar), "-C", str(tmp_path / "deep3"), "."], check=True)
    with tar.open("rb") as f:
        res = untar.extract(f, tmp_path / "out", what="test", max_bytes=1 << 20)
    assert res.notes and all(f"deeper than {untar.MAX_DEPTH}" in n for n in res.notes[:-1])
    assert (tmp_path / "out" / ("d/" * (untar.MAX_DEPTH - 1))).is_dir()


def test_listing_caps_cut_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsnames, "CAPS", fsnames.Caps(entries=50, depth=8, name_bytes=300))
    for i in range(100):
        (tmp_path / f"file{i:03d}").touch()
    snap = snapshot_host_tree(str(tmp_path), "/app", ())
    assert len(snap.entries) <= 50 and snap.note and "bytes of names" in snap.note
    monkeypatch.setattr(fsnames, "CAPS", fsnames.Caps(entries=50, depth=8))
    snap = snapshot_host_tree(str(tmp_path), "/app", ())
    assert len(snap.entries) == 50 and snap.note and "more than 50 entries" in snap.note


# --- whole trials ------------------------------------------------------------------------

def _suite(root: Path) -> Path:
    suite = root / "suite"
    # the workdir's listing of the one cut past its entries cap may leave out any name (find's
    # order on docker): the names are checked in the other's
    make_task(suite, "hostile-pass", solve=HOSTILE.replace("@APP@", "0").replace("@ART@", str(MANY)) +
              "echo done > /app/done\n")
    make_task(suite, "hostile-fail", solve=HOSTILE.replace("@APP@", str(MANY)).replace("@ART@", str(MANY)))
    return suite


async def _run_hostile(tmp_path: Path, backend: str) -> None:
    store = Store.open(tmp_path / "runs")
    rid, _ = await run(store, prepare(RunRequest(suites=[str(_suite(tmp_path))], agents=["oracle"],
                                                 backend=backend, max_infra_retries=0)))
    store.close()
    store = Store.open(tmp_path / "runs")  # what was stored, read back
    trials = {t.task_id: t for t in store.latest_completed_trials(rid)}
    assert {k: t.status for k, t in trials.items()} == {
        "hostile-pass": TrialStatus.PASSED, "hostile-fail": TrialStatus.FAILED}, \
        {k: t.error for k, t in trials.items()}
    for t in trials.values():
        notes = json.dumps(t.extra)
        cut = t.task_id == "hostile-fail"
        assert ("more than 400 entries" in json.dumps(t.extra["fs_diff_problems"])) == cut, notes
        assert f"more than {TEST_MAX_FILES} files" in notes, notes
        assert "deeper than 24 levels" in notes, notes
        arts = {a.name: a for a in store.artifacts(rid, t.id)}
        assert all(n.isprintable() and len(n) <= artifacts_mod.ARTIFACT_NAME_MAX for n in arts), arts
        collected = {fsnames.unescape_name(n.removeprefix("artifacts/logs/artifacts/"))
                     for n in arts if n.startswith("artifacts/logs/artifacts/")}
        for name in HOSTILE_NAMES:
            if len(fsnames.escape_name(name)) + 25 <= artifacts_mod.ARTIFACT_NAME_MAX:
                assert name in collected, (name, sorted(collected)[:20])
        assert any(n.startswith("artifacts/logs/artifacts/\\xff\\xff") and n.endswith(
            tuple("0123456789abcdef")) for n in arts), "the 255-byte name, cut with a digest"
        diff = json.loads((store.run_dir(rid) / arts["fs_diff.json"].relpath).read_text())
        created = {fsnames.unescape_name(p) for p in diff["created"]}
        for name in [*HOSTILE_NAMES, b"fifo", b"sock", b"loop1", b"self"] if not cut else []:
            assert name in created, name
        assert diff["notes"] and (len(diff["created"]) <= TEST_CAPS.entries)


@pytest.mark.slow
async def test_hostile_names_and_trees_never_make_a_trial_infra_invalid_local(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsnames, "CAPS", TEST_CAPS)
    monkeypatch.setattr(artifacts_mod, "ARTIFACT_MAX_FILES", TEST_MAX_FILES)
    await _run_hostile(tmp_path, "local")


@pytest.mark.slow
@pytest.mark.docker
async def test_hostile_names_and_trees_never_make_a_trial_infra_invalid_docker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_daemon: object) -> None:
    monkeypatch.setattr(fsnames, "CAPS", TEST_CAPS)
    monkeypatch.setattr(artifacts_mod, "ARTIFACT_MAX_FILES", TEST_MAX_FILES)
    await _run_hostile(tmp_path, "docker")
