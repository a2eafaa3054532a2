"""Harbor's dataset registry (``run -d``, ``tasks list -d``; ``tasks/datasets.py``, the fetching
``tasks/gitfetch.py``): a registry and git repositories served on loopback over HTTP (``git
http-backend``), Harbor's own example tasks in them; the fetch cache, offline reuse, and the
registry as hostile input."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dataset_server import make_repo, serve
from typer.testing import CliRunner

from agentmeter.cli import app
from agentmeter.tasks import datasets, gitfetch
from agentmeter.tasks.datasets import (
    DatasetError,
    FetchError,
    RegistryTask,
    fetch_task,
    load_dataset,
    resolve_version,
)

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "harbor-examples"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpora/harbor-examples")

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="Harbor's examples are not here")


def _task(name: str, url: str, commit: str | None, path: str) -> dict[str, Any]:
    return {"name": name, "git_url": url, "git_commit_id": commit, "path": path}


class Served:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo, self.commit = make_repo(root, "tasks", {
            "hello-workdir": CORPUS / "hello-workdir",
            "tasks/hello-world": CORPUS / "hello-world",
            "evil/environment/Dockerfile": "FROM ubuntu:24.04\n",
        }, links={"evil/tests/test.sh": "/etc/passwd",
                  "linked": "tasks"})
        url = "{base}/git/tasks.git"
        good = _task("hello-workdir", url, self.commit, "hello-workdir")
        self.registry: list[dict[str, Any]] = [
            {"name": "demo", "version": "1.0", "description": "two examples",
             "tasks": [good, _task("hello-world", url, self.commit, "tasks/hello-world")]},
            {"name": "demo", "version": "0.9", "description": "", "tasks": [good]},
            {"name": "demo", "version": "head", "description": "the default branch",
             "tasks": [_task("hello-workdir", url, None, "hello-workdir")]},
            {"name": "hostile", "version": "1.0", "description": "", "tasks": [
                good,
                _task("traversal", url, self.commit, "../outside"),
                _task("ext", "ext::sh -c touch% {marker}", self.commit, "hello-workdir"),
                _task("ssh", "ssh://-oProxyCommand=touch% {marker}/x", self.commit, "x"),
                _task("symlink", url, self.commit, "evil"),
                _task("via-link", url, self.commit, "linked/hello-world"),
                _task("missing-commit", url, "0" * 40, "hello-workdir"),
                _task("unreachable", "http://127.0.0.1:9/nothing.git", self.commit, "a"),
                _task("missing-path", url, self.commit, "tasks/nope"),
                _task("local", f"file://{self.repo}", self.commit, "tasks/hello-world"),
            ]},
        ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    s = Served(tmp_path_factory.mktemp("served"))
    marker = s.root / "pwned"
    registry = json.loads(json.dumps(s.registry).replace("{marker}", str(marker)))
    with serve(s.root, registry) as base:
        yield s, base


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    c = tmp_path / "datasets"
    monkeypatch.setattr(datasets, "dataset_cache_dir", lambda: c)
    return c


def test_version_choice_is_harbors() -> None:
    assert resolve_version(["1.0", "head", "2.0"]) == "head"
    assert resolve_version(["1.0", "2.0", "1.10", "parity"]) == "2.0"
    assert resolve_version(["beta", "alpha"]) == "beta"


def test_tasks_list_fetches_over_http(served: tuple[Served, str], cache: Path) -> None:
    s, base = served
    out = CliRunner().invoke(app, ["tasks", "list", "-d", "demo@1.0", "--registry",
                                   f"{base}/registry.json", "--json"])
    assert out.exit_code == 0, out.output
    assert [t["id"] for t in json.loads(out.output)] == ["hello-workdir", "hello-world"]
    entries = sorted(p.name for p in (cache / "tasks").iterdir())
    assert len(entries) == 2 and not list((cache / "tmp").iterdir())  # no staging left
    # the checkout was sparse: the entry holds the task, not its repository's other tasks
    assert {p.name for p in (cache / "tasks").glob("*/*") if p.is_dir()} == {
        "hello-workdir", "hello-world"}


def test_unknown_dataset_and_version(served: tuple[Served, str], cache: Path) -> None:
    _, base = served
    reg = f"{base}/registry.json"
    with pytest.raises(DatasetError, match="dataset 'nope' is not in registry"):
        load_dataset("nope@1.0", reg)
    with pytest.raises(DatasetError, match=r"no version '3.0'.*versions: 0.9, 1.0, head"):
        load_dataset("demo@3.0", reg)
    # no version: Harbor's choice, 'head' (the default branch, its commit resolved)
    suite = load_dataset("demo", reg)
    assert (suite.name, suite.version, suite.task_ids) == ("demo", "head", ["hello-workdir"])


def test_registry_from_a_file(tmp_path: Path, cache: Path) -> None:
    """``--registry FILE`` (or a ``file://`` URL), repositories by ``file://``; a registry that
    is not Harbor's list of datasets is one clear error."""
    s = Served(tmp_path / "served")
    rows = json.loads(json.dumps(s.registry[:1]).replace("{base}/git", f"file://{s.root}"))
    reg = tmp_path / "registry.json"
    reg.write_text(json.dumps(rows))
    assert load_dataset("demo", str(reg)).task_ids == ["hello-workdir", "hello-world"]
    assert load_dataset("demo@1.0", f"file://{reg}").version == "1.0"
    reg.write_text('{"name": "demo"}')
    with pytest.raises(DatasetError, match="expected a JSON list of datasets"):
        load_dataset("demo", str(reg))
    reg.write_text(json.dumps([{"name": "demo", "version": "1", "tasks": [{"name": "x"}]}]))
    with pytest.raises(DatasetError, match=r"demo@1 in registry .*: tasks.0.path: Field required"):
        load_dataset("demo", str(reg))


def test_hostile_registry_entries(served: tuple[Served, str], cache: Path) -> None:
    """One dataset of bad entries: each is refused with one reason naming the dataset and the
    task; the good task still loads; nothing runs the ext:: command."""
    s, base = served
    suite = load_dataset("hostile@1.0", f"{base}/registry.json")
    assert suite.task_ids == ["hello-workdir"]
    reasons = [k.reason for k in suite.skipped]
    assert len(reasons) == 9 and all(r.startswith("dataset hostile@1.0: task ") for r in reasons)
    text = "\n".join(reasons)
    assert "task traversal: path '../outside' refused: it leaves the repository" in text
    assert "task ext: git_url 'ext::sh" in text and "refused: only http, https, git, file" in text
    assert "task ssh: git_url 'ssh://-oProxyCommand" in text
    assert "task symlink: tests/test.sh: a symlink leading out of the task ('/etc/passwd')" in text
    # git's sparse pattern names a directory: a symlink on the way is never checked out
    assert "task via-link: path 'linked/hello-world': no such directory at that commit" in text
    assert "task missing-commit: commit 0000000000000000000000000000000000000000 cannot be " \
           "fetched from http://127.0.0.1:" in text
    assert "task unreachable: repository http://127.0.0.1:9/nothing.git cannot be reached" in text
    assert "task missing-path: path 'tasks/nope': no such directory at that commit" in text
    # review 3: a registry from the network names no repository of this host
    assert "task local: git_url 'file://" in text and "a local repository" in text
    assert not (s.root / "pwned").exists() and not (s.root / "pwned" / "x").exists()
    # nothing refused was cached
    assert len(list((cache / "tasks").iterdir())) == 1


def test_a_symlink_on_the_task_path_is_refused(tmp_path: Path) -> None:
    """Were a checkout to hold a symlink on the task's path, the task is not read through it."""
    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    (elsewhere / "t").mkdir(parents=True)
    checkout.mkdir()
    (checkout / "out").symlink_to(elsewhere)
    with pytest.raises(FetchError, match="'out' is a symlink in the repository"):
        gitfetch.check_checked_out(checkout, ("out", "t"))
    (checkout / "in" / "t").mkdir(parents=True)
    assert gitfetch.check_checked_out(checkout, ("in", "t")) == checkout / "in" / "t"


def test_git_speaks_only_the_allowed_protocols(tmp_path: Path) -> None:
    """Even past the URL check, git itself is told to speak only http(s), git and file (ssh,
    which git allows by default, runs a command named by configuration)."""
    marker = tmp_path / "pwned"
    with pytest.raises(FetchError, match="transport 'ext' not allowed"):
        gitfetch.run_git(["ls-remote", f"ext::sh -c touch% {marker}"], tmp_path, tmp_path)
    with pytest.raises(FetchError, match="transport 'ssh' not allowed"):
        gitfetch.run_git(["ls-remote", "ssh://127.0.0.1:9/x.git"], tmp_path, tmp_path)
    assert not marker.exists()


def test_git_reads_no_inherited_configuration(served: tuple[Served, str], cache: Path,
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Configuration in the environment git would inherit (here: a hooks directory whose
    post-checkout hook writes a marker) never reaches the git that fetches tasks."""
    s, base = served
    hooks, marker = tmp_path / "hooks", tmp_path / "hooked"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (hooks / "post-checkout").chmod(0o755)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.hooksPath")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(hooks))
    fetch_task(RegistryTask(name="w", git_url=f"{base}/git/tasks.git", git_commit_id=s.commit,
                            path="hello-workdir"), cache)
    assert not marker.exists()


def test_an_interrupted_fetch_leaves_nothing(served: tuple[Served, str], cache: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    s, base = served
    task = RegistryTask(name="hello-workdir", git_url=f"{base}/git/tasks.git",
                        git_commit_id=s.commit, path="hello-workdir")
    real = shutil.copytree

    def half(src: Path, dst: Path, **kw: Any) -> Any:
        Path(dst).mkdir(parents=True)
        (Path(dst) / "task.toml").write_text("half")
        raise OSError("disk full")
    monkeypatch.setattr(shutil, "copytree", half)
    with pytest.raises(OSError, match="disk full"):
        fetch_task(task, cache)
    assert not (cache / "tasks").exists() or not list((cache / "tasks").iterdir())
    monkeypatch.setattr(shutil, "copytree", real)
    assert (fetch_task(task, cache) / "task.toml").read_text().startswith("schema_version")


def test_size_bound(served: tuple[Served, str], cache: Path,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    s, base = served
    monkeypatch.setattr(gitfetch, "MAX_TASK_FILES", 2)
    with pytest.raises(FetchError, match="more than 2 files"):
        fetch_task(RegistryTask(name="w", git_url=f"{base}/git/tasks.git", git_commit_id=s.commit,
                                path="hello-workdir"), cache)


def test_unpinned_task_offline_uses_its_last_fetch(tmp_path: Path, cache: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A task without a commit follows the default branch (resolved each time, as Harbor); when
    the repository cannot be reached, the copy fetched last is used, with a notice."""
    s = Served(tmp_path / "served")
    with serve(s.root, []) as base:
        task = RegistryTask(name="w", git_url=f"{base}/git/tasks.git", path="hello-workdir")
        online = fetch_task(task, cache)
    assert json.loads((online.parent / "source.json").read_text())["git_commit_id"] == s.commit
    assert fetch_task(task, cache) == online
    assert "using the copy of HEAD fetched before" in capsys.readouterr().err


def _summary(output: str) -> dict[str, Any]:
    """The run's --json summary (the CLI runner mixes stderr's notes into the output)."""
    found: dict[str, Any] = json.JSONDecoder().raw_decode(output, output.index('{\n "run_id"'))[0]
    return found


@pytest.mark.slow
def test_run_dataset_then_offline_from_cache(tmp_path: Path, cache: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``run -d`` fetches over HTTP and the oracle passes hello-workdir; with the server gone
    the same run passes again from the cache (the registry's kept copy, no git at all)."""
    s = Served(tmp_path / "served")
    registry = s.registry[:1]
    runner = CliRunner()
    with serve(s.root, registry) as base:
        args = ["run", "-d", "demo@1.0", "--registry", f"{base}/registry.json", "-a", "oracle",
                "-t", "hello-workdir", "--json"]
        first = runner.invoke(app, [*args, "--store", str(tmp_path / "one")])
    assert first.exit_code == 0, first.output
    assert _summary(first.output)["configs"][0]["passed"] == 1
    def no_git(*a: Any, **kw: Any) -> str:
        raise AssertionError("git ran for a pinned task in the cache")
    monkeypatch.setattr(gitfetch, "run_git", no_git)
    second = runner.invoke(app, [*args, "--store", str(tmp_path / "two")])
    assert second.exit_code == 0, second.output
    assert _summary(second.output)["configs"][0]["passed"] == 1
    assert "using the copy read" in second.output
