"""A task's artifact destination stays inside the trial's artifacts directory (security review
finding 1: ``artifacts = ["/../../root/.ssh"]`` made the runner write agent-made files anywhere on
the host as root). Loaders refuse such a destination naming the file and the key; the runner
checks containment again where it writes (trial) and reads (separate verifier). Unit level: no
sandbox is started."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError
from taskgen import make_scenario, make_task

from agentmeter.runner import separate
from agentmeter.runner.trial import TrialRunner
from agentmeter.sandbox.copyout import CopyNotes
from agentmeter.sandbox.spec import ExecResult
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.models import TaskArtifact
from agentmeter.tasks.suite import load_suite, load_task

ATTACK = "/../../../../../../../../../../../../tmp/pwned_dir"


@pytest.mark.parametrize(("extra", "field"), [
    (f'artifacts = ["{ATTACK}"]\n', "artifacts[0]"),
    (f'artifacts = [{{source = "{ATTACK}"}}]\n', "artifacts[0]"),
    ('artifacts = [{source = "/app/x", destination = "a/../../x"}]\n',
     "artifacts[0].destination"),
    ('artifacts = [{source = "/app/x", destination = "/abs"}]\n', "artifacts[0].destination"),
    ('artifacts = ["/"]\n', "artifacts[0]"),
    ('artifacts = [{source = "/app/x", destination = "./"}]\n', "artifacts[0].destination"),
])
def test_the_loader_refuses_a_destination_outside_naming_file_and_key(
        tmp_path: Path, extra: str, field: str) -> None:
    task = make_task(tmp_path, "t")
    toml = task / "task.toml"
    toml.write_text(extra + toml.read_text())
    with pytest.raises(TaskError) as info:
        load_task(task)
    problems = {p.field: p.message for p in info.value.problems}
    assert field in problems, problems
    assert "artifacts directory" in problems[field]
    assert str(toml) in str(info.value)


def test_a_steps_artifacts_are_checked_too(tmp_path: Path) -> None:
    d = make_scenario(tmp_path, "scn", steps=1)
    toml = d / "task.toml"
    toml.write_text(toml.read_text().replace('name = "s1"\n',
                                             f'name = "s1"\nartifacts = ["{ATTACK}"]\n'))
    with pytest.raises(TaskError) as info:
        load_suite(d)
    assert "steps[0].artifacts[0]" in {p.field for p in info.value.problems}


@pytest.mark.parametrize("dest", ["../x", "a/../../x", "/etc", "", ".", "a\0b"])
def test_the_model_refuses_it_whatever_the_loader(dest: str) -> None:
    with pytest.raises(ValidationError):
        TaskArtifact(source="/app/x", destination=dest)


def _outside_via_link(tmp_path: Path) -> tuple[Path, Path]:
    """An artifacts directory holding a link to a directory outside it (as a tree copied out
    earlier might), and that outside directory."""
    root = tmp_path / "trial" / "artifacts"
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "secret").write_text("host file\n")
    root.mkdir(parents=True)
    (root / "link").symlink_to(outside)
    return root, outside


def test_a_separate_verifier_is_never_given_a_host_path_outside(tmp_path: Path) -> None:
    root, outside = _outside_via_link(tmp_path)
    arts = (TaskArtifact.model_construct(source="/x", destination="../../host", exclude=(),
                                         service=None),
            TaskArtifact(source="/y", destination="link"),
            TaskArtifact(source="/z", destination="link/secret"))
    task: Any = SimpleNamespace(artifacts=arts)
    assert separate.collected(task, root) == []


class _Box:
    """A sandbox whose artifacts are directories (a name with a dot: a file) holding one file;
    copy_out behaves as copyout's; its image's programs must never be run."""

    def __init__(self) -> None:
        self.copied: list[str] = []

    async def exec(self, argv: list[str], user: str | None = None) -> ExecResult:
        raise AssertionError(f"a program of the image was run: {argv}")

    async def copy_out(self, src: str, dest: Path, **kw: Any) -> list[str]:
        self.copied.append(src)
        notes = CopyNotes()
        name = PurePosixPath(src).name
        if "." in name:
            (dest / name).write_text("a file\n")
            notes.top_kind = "file"
        else:
            (dest / "owned.txt").write_text("written by the agent\n")
            notes.top_kind = "dir"
        return notes


async def _collect(root: Path, *arts: TaskArtifact) -> list[str]:
    notes: dict[str, list[str]] = {}
    fake: Any = SimpleNamespace(dir=root.parent, task=SimpleNamespace(artifacts=arts),
                                _note=lambda key, value: notes.__setitem__(key, value),
                                _artifact=lambda *a: None)
    await TrialRunner._collect_artifacts(fake, _Box())  # type: ignore[arg-type]
    return notes.get("artifact_problems", [])


async def test_the_trial_never_writes_outside_the_artifacts_directory(tmp_path: Path) -> None:
    root, outside = _outside_via_link(tmp_path)
    problems = await _collect(
        root, TaskArtifact.model_construct(source="/x", destination="../../pwned", exclude=(),
                                           service=None),
        TaskArtifact(source="/y", destination="link/sub"))
    assert (root / "logs" / "artifacts" / "owned.txt").is_file()  # the conventional directory
    assert not (tmp_path / "pwned").exists() and not (outside / "sub").exists()
    assert sum("not inside the artifacts directory" in p for p in problems) == 2


async def test_file_or_directory_is_what_the_copy_says_not_the_images_sh(tmp_path: Path) -> None:
    """Security review finding 9: the image's own ``sh``, run as root after the agent, said
    whether an artifact was a file or a directory."""
    root = tmp_path / "trial" / "artifacts"
    problems = await _collect(root, TaskArtifact(source="/app/out", destination="out"),
                              TaskArtifact(source="/app/log.txt", destination="logs/the.txt"))
    assert problems == []
    assert (root / "out" / "owned.txt").is_file()
    assert (root / "logs" / "the.txt").read_text() == "a file\n"
    assert sorted(p.name for p in (root / "logs").iterdir()) == ["artifacts", "the.txt"]
