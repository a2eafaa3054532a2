"""Task and suite loading: Harbor layout, Terminal-Bench v1, suites, bad input, pytest rewards."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agentmeter.records import TaskRecord
from agentmeter.runner.network import network_label, verifier_network_label
from agentmeter.tasks.errors import TaskError
from agentmeter.tasks.models import task_digest
from agentmeter.tasks.suite import (
    builtin_suite_names,
    detect_format,
    load_suite,
    load_suites,
    load_task,
)
from agentmeter.verify.pytest_output import parse_pytest_output

FIXTURES = Path(__file__).parent / "fixtures"
HARBOR = FIXTURES / "harbor-task"
TB = FIXTURES / "tb-task"
BAD = FIXTURES / "bad"


def copy_task(src: Path, dest_parent: Path, name: str | None = None) -> Path:
    dest = dest_parent / (name or src.name)
    shutil.copytree(src, dest)
    return dest


def problems_text(exc: pytest.ExceptionInfo[TaskError]) -> str:
    return str(exc.value)


# --- native (Harbor) -----------------------------------------------------------------------


def test_harbor_task_loads_unmodified() -> None:
    task = load_task(HARBOR)
    assert task.id == "harbor-task"
    assert task.format == "native"
    assert task.path == HARBOR.resolve()
    assert "Count the words" in task.instruction
    assert task.dockerfile == HARBOR.resolve() / "environment" / "Dockerfile"
    assert task.setup_script is None
    assert task.test_command == "bash /tests/test.sh"
    assert task.verifier_kind == "reward-file" and task.pass_threshold == 1.0
    assert task.solution_command == "bash /solution/solve.sh"
    assert task.tier == "medium" and task.difficulty == "medium"
    assert task.category == "text-processing"
    assert task.tags == ("text", "wc")
    assert task.agent_timeout_s == 300.0 and task.verifier_timeout_s == 120.0
    assert task.build_timeout_s == 600.0
    assert (task.cpus, task.memory_mb, task.storage_mb) == (1.0, 1024, 2048)
    assert task.allow_internet is False
    assert (task.budgets.max_tokens, task.budgets.max_usd, task.budgets.max_calls) == (
        200000, 0.5, 40)
    assert task.verifier_env == {"EXPECTED_FILE": "/tests/expected.txt"}
    assert task.solution_env == {"LANG": "C.UTF-8"}
    assert task.author_email == "ada@example.com"
    assert task.description == "Count words in a file."
    # Harbor's [metadata] is free-form: keys we do not interpret are kept, not rejected
    assert task.metadata_extra == {"codebase_size": "tiny"}
    assert set(task.verifier_files()) == {"test.sh", "expected.txt"}
    assert set(task.solution_files()) == {"solve.sh"}
    assert task.digest.startswith("sha256:")
    assert len({task, load_task(HARBOR)}) == 1  # hashable, equal when loaded twice


def test_task_record_from_task() -> None:
    task = load_task(HARBOR)
    record = task.to_record(suite="fixtures")
    assert isinstance(record, TaskRecord)
    assert record.id == "harbor-task" and record.digest == task.digest
    assert record.suite == "fixtures" and record.tier == "medium"
    assert record.tags == ["text", "wc"] and record.path == str(task.path)


def test_harbor_keys_at_defaults_and_features_we_map(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path)
    (task_dir / "task.toml").write_text(
        'schema_version = "1.1"\nsource = "harbor-registry"\n'
        'artifacts = ["/app/out.log", {source = "/app/report.json"}]\n'
        '[task]\nname = "org/x"\n[metadata]\ndifficulty = "unknown"\n'
        '[agent]\nuser = 1000\nnetwork_mode = "public"\n'
        '[verifier]\nnetwork_mode = "public"\nuser = "root"\n'
        '[environment]\nnetwork_mode = "public"\nmemory = "2G"\nos = "Linux"\n'
        'gpus = 0\nmcp_servers = []\nworkdir = "/app"\nbase = "host"\n'
        '[environment.env]\nTOKEN = "${TOKEN:-x}"\n')
    task = load_task(task_dir)
    assert task.tier is None and task.difficulty == "unknown"
    assert task.source == "harbor-registry"
    assert [a.source for a in task.artifacts] == ["/app/out.log", "/app/report.json"]
    assert task.allow_internet is True
    assert task.verifier_user == "root"
    assert task.memory_mb == 2048
    assert task.workdir == "/app" and task.base == "host"
    assert task.environment_env == {"TOKEN": "${TOKEN:-x}"}
    assert task.tags == ()  # no metadata.tags and no [task].keywords
    assert task.agent_timeout_s == 600.0  # Harbor leaves it open; we default


def test_tier_may_differ_from_difficulty(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path)
    text = (task_dir / "task.toml").read_text().replace(
        'difficulty = "medium"', 'difficulty = "medium"\ntier = "hard"\nsource = "ours"')
    (task_dir / "task.toml").write_text(text)
    task = load_task(task_dir)
    assert (task.tier, task.difficulty, task.source) == ("hard", "medium", "ours")


def test_setup_script_environment(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path)
    (task_dir / "environment" / "Dockerfile").unlink()
    (task_dir / "environment" / "setup.sh").write_text("#!/bin/sh\nmkdir -p /app\n")
    task = load_task(task_dir)
    assert task.dockerfile is None
    assert task.setup_script == task_dir.resolve() / "environment" / "setup.sh"


@pytest.mark.parametrize("rel", ["instruction.md", "task.toml", "environment/Dockerfile"])
def test_a_task_file_linked_out_of_the_task_is_not_read(tmp_path: Path, rel: str) -> None:
    """Security review 2: a task checked out by hand with ``instruction.md`` linked to a host
    file gave that file (read as root) to the agent as its instruction. A link inside the task
    still loads."""
    secret = tmp_path / "host-secret"
    secret.write_text("HOST-SECRET-1234\n")
    task_dir = copy_task(HARBOR, tmp_path)
    (task_dir / rel).unlink()
    (task_dir / rel).symlink_to(secret)
    with pytest.raises(TaskError) as exc:
        load_task(task_dir)
    assert "a symbolic link leading out of the task" in problems_text(exc)
    assert "HOST-SECRET" not in problems_text(exc)
    inside = copy_task(HARBOR, tmp_path, "inside")
    (inside / "notes.md").write_text((inside / rel).read_text())
    (inside / rel).unlink()
    (inside / rel).symlink_to(os.path.relpath(inside / "notes.md", (inside / rel).parent))
    load_task(inside)


@pytest.mark.parametrize(("source", "rel"), [(HARBOR, "tests"), (HARBOR, "solution"),
                                            (TB, "tests"), (TB, "run-tests.sh")])
def test_a_task_directory_linked_out_of_the_task_is_refused(tmp_path: Path, source: Path,
                                                            rel: str) -> None:
    """tests/ and solution/ (and a Terminal-Bench task's tests/ and run-tests.sh: security review
    3; its verifier has the internet by default) are copied into a sandbox as root: a link to a
    host directory would copy it there."""
    task_dir = copy_task(source, tmp_path)
    outside = tmp_path / "host-dir"
    shutil.move(task_dir / rel, outside)
    (task_dir / rel).symlink_to(outside)
    with pytest.raises(TaskError) as exc:
        load_task(task_dir)
    assert "a symbolic link leading out of the task" in problems_text(exc)


def plant_long_chain(task_dir: Path, name: str, secret: Path) -> None:
    """``task_dir/name``: a link the kernel follows to ``secret`` while Python 3.11's
    non-strict realpath says it stays in the task (CVE-2025-4517's trick). Beside the task:
    ``chain/`` nests 16 directories of 247 characters (``a``..``p`` link each level to the
    next) and a link ``LLL`` at the bottom; realpath's path passes PATH_MAX at ``LLL``, so it
    takes ``LLL`` for a plain name and pops the ``..`` that follow lexically, landing in the
    task; the kernel follows ``LLL`` into ``evil/e/e/...`` and the same ``..`` land in
    ``evil/``, whose ``<task>/instruction.real`` links to ``secret``."""
    base, steps, comp, pops = task_dir.parent, "abcdefghijklmnop", "d" * 247, 18
    (base / "chain").mkdir()
    fd = os.open(base / "chain", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for step in steps:
            os.mkdir(comp, dir_fd=fd)
            os.symlink(comp, step, dir_fd=fd)
            inner = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.symlink("../" * (len(steps) + 1) + "evil/" + "e/" * pops, "L" * 254, dir_fd=fd)
    finally:
        os.close(fd)
    (base / "evil" / Path(*["e"] * pops)).mkdir(parents=True)
    (base / "evil" / task_dir.name).mkdir()
    (base / "evil" / task_dir.name / "instruction.real").symlink_to(secret)
    os.symlink("../chain/" + "/".join(steps) + "/" + "L" * 254 + "/" + "../" * pops
               + task_dir.name + "/instruction.real", task_dir / name)


def test_a_link_chain_past_path_max_does_not_pass_for_inside(tmp_path: Path) -> None:
    """Security review 3: ``Path.resolve()`` said a chain of links past PATH_MAX stayed in the
    task while the kernel followed it out: ``instruction.md`` read a host file (as root) for
    the agent; gitfetch's tree check passed it too."""
    from agentmeter.paths import realpath
    from agentmeter.tasks.gitfetch import FetchError, check_task_tree

    secret = tmp_path / "host-secret"
    secret.write_text("HOST-SECRET-1234\n")
    task_dir = copy_task(HARBOR, tmp_path)
    (task_dir / "instruction.md").unlink()
    plant_long_chain(task_dir, "instruction.md", secret)
    link = task_dir / "instruction.md"
    assert link.read_text() == "HOST-SECRET-1234\n"  # the kernel's answer
    with pytest.raises(TaskError) as exc:
        load_task(task_dir)
    assert "a symbolic link leading out of the task" in problems_text(exc)
    assert "HOST-SECRET" not in problems_text(exc)
    with pytest.raises(FetchError, match="leading out of the task"):
        check_task_tree(task_dir)
    assert realpath(link) is None


def test_a_terminal_bench_task_yaml_linked_out_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("instruction: HOST-SECRET-1234\n")
    task_dir = copy_task(TB, tmp_path)
    (task_dir / "task.yaml").unlink()
    (task_dir / "task.yaml").symlink_to(secret)
    with pytest.raises(TaskError) as exc:
        load_task(task_dir)
    assert "a symbolic link leading out of the task" in problems_text(exc)


def test_docker_image_replaces_dockerfile(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path)
    (task_dir / "environment" / "Dockerfile").unlink()
    with pytest.raises(TaskError, match="needs a Dockerfile or setup.sh"):
        load_task(task_dir)
    text = (task_dir / "task.toml").read_text().replace(
        "[environment]\n", '[environment]\ndocker_image = "example/img:1"\n')
    (task_dir / "task.toml").write_text(text)
    assert load_task(task_dir).docker_image == "example/img:1"


def test_task_without_solution(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path)
    shutil.rmtree(task_dir / "solution")
    task = load_task(task_dir)
    assert not task.has_solution and task.solution_files() == {}


# --- digest --------------------------------------------------------------------------------


def test_digest_is_stable_and_content_sensitive(tmp_path: Path) -> None:
    a = copy_task(HARBOR, tmp_path / "a")
    b = copy_task(HARBOR, tmp_path / "b", name="other-name")
    assert task_digest(a) == task_digest(b) == load_task(HARBOR).digest
    (b / "__pycache__").mkdir()
    (b / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert task_digest(b) == task_digest(a)  # caches are not content
    (b / "tests" / "expected.txt").write_text("10\n")
    assert task_digest(b) != task_digest(a)
    (b / "tests" / "expected.txt").write_text("9\n")
    assert task_digest(b) == task_digest(a)
    os.chmod(b / "tests" / "expected.txt", 0o755)
    assert task_digest(b) != task_digest(a)  # the executable bit is content
    os.chmod(b / "tests" / "expected.txt", 0o644)
    (b / "tests" / "new.txt").write_text("")
    assert task_digest(b) != task_digest(a)


# --- Terminal-Bench v1 ---------------------------------------------------------------------


def test_terminal_bench_task_maps_to_task() -> None:
    task = load_task(TB)
    assert detect_format(TB) == "terminal-bench"
    assert task.format == "terminal-bench"
    assert task.instruction.startswith("Create a file /app/hello.txt")
    assert task.dockerfile == TB.resolve() / "Dockerfile"
    assert task.environment_dir == TB.resolve()
    assert task.verifier_kind == "pytest" and task.pass_threshold == 1.0
    assert task.test_command == "bash /tests/run-tests.sh"
    assert task.verifier_env == {"TEST_DIR": "/tests"}
    files = task.verifier_files()
    assert set(files) == {"run-tests.sh", "test_outputs.py"}
    assert files["run-tests.sh"] == TB.resolve() / "run-tests.sh"
    assert task.solution_command == "bash /solution/solution.sh"
    assert set(task.solution_files()) == {"solution.sh"}
    assert task.agent_timeout_s == 180.0 and task.verifier_timeout_s == 30.0
    assert task.tier == "easy" and task.category == "file-operations"
    assert task.tags == ("file-operations", "beginner")
    assert task.loader_notes == ()  # the compose file holds only harness wiring


def test_terminal_bench_compose_notes_and_env(tmp_path: Path) -> None:
    task_dir = copy_task(TB, tmp_path)
    (task_dir / "docker-compose.yaml").write_text(
        "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n"
        "    environment:\n      - TEST_DIR=${T_BENCH_TEST_DIR}\n      - MODE=strict\n"
        "    ports: ['8080:80']\nnetworks: {}\n")
    text = (task_dir / "task.yaml").read_text().replace(
        "run_tests_in_same_shell: false", "run_tests_in_same_shell: true")
    (task_dir / "task.yaml").write_text(text)
    task = load_task(task_dir)
    assert task.environment_env == {"MODE": "strict"}
    notes = "\n".join(task.loader_notes)
    assert "ports" in notes and "networks" in notes and "run_tests_in_same_shell" in notes


@pytest.mark.parametrize("build", [
    "context: ../../../../../../../../../..\n      dockerfile: proc/self/cwd/Dockerfile.real",
    "context: /\n      dockerfile: {task}/Dockerfile",
    "dockerfile: /etc/hostname",
    "dockerfile: ../../../../../../../../etc/hostname",
])
def test_terminal_bench_build_context_stays_in_the_task(tmp_path: Path, build: str) -> None:
    """Security review 2: the compose file's build context was taken as given, so a context of
    '/' made every host file a COPY source (``COPY etc/shadow /leak``, read as root, into the
    agent's image); the Dockerfile could be any host file."""
    task_dir = copy_task(TB, tmp_path)
    (task_dir / "docker-compose.yaml").write_text(
        "services:\n  client:\n    build:\n      "
        + build.format(task=task_dir.resolve()) + "\n")
    with pytest.raises(TaskError) as exc:
        load_task(task_dir)
    assert "lies outside the task" in problems_text(exc)


def test_terminal_bench_old_descriptions_form(tmp_path: Path) -> None:
    task_dir = copy_task(TB, tmp_path)
    (task_dir / "task.yaml").write_text(
        "descriptions:\n  - key: base\n    description: Say hello.\ndifficulty: hard\n")
    task = load_task(task_dir)
    assert task.instruction == "Say hello." and task.tier == "hard"
    assert task.agent_timeout_s == 360.0  # Terminal-Bench's default


def test_terminal_bench_solution_yaml_is_unsupported(tmp_path: Path) -> None:
    task_dir = copy_task(TB, tmp_path)
    (task_dir / "solution.sh").unlink()
    (task_dir / "solution.yaml").write_text("- command: echo hi\n")
    with pytest.raises(TaskError, match=r"solution\.yaml: command-list solutions"):
        load_task(task_dir)


def test_terminal_bench_bad_yaml_names_file(tmp_path: Path) -> None:
    task_dir = copy_task(TB, tmp_path)
    (task_dir / "task.yaml").write_text("instruction: [unclosed\n")
    with pytest.raises(TaskError, match=r"task\.yaml: invalid YAML"):
        load_task(task_dir)
    (task_dir / "task.yaml").write_text("difficulty: easy\n")
    with pytest.raises(TaskError, match="instruction"):
        load_task(task_dir)


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("missing-instruction", r"missing-instruction/instruction\.md: missing"),
        ("missing-tests", r"missing-tests/tests/test\.sh: missing"),
        ("gpu-task", r"gpu-task/task\.toml: environment\.gpus: 1 cannot be honoured"),
        ("tb-no-run-tests", r"tb-no-run-tests/run-tests\.sh: missing"),
        ("tb-multi-service", r"docker-compose\.yaml: services: multi-container"),
    ],
)
def test_bad_fixture_names_file_and_field(name: str, expected: str) -> None:
    with pytest.raises(TaskError, match=expected):
        load_task(BAD / name)


def test_bad_values_all_reported_at_once() -> None:
    with pytest.raises(TaskError) as exc:
        load_task(BAD / "bad-values")
    fields = {p.field for p in exc.value.problems}
    assert fields == {"metadata.difficulty", "agent.timeout_sec", "environment.allow_internet"}
    assert all(p.file.name == "task.toml" for p in exc.value.problems)


def test_invalid_toml_names_file(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path)
    (task_dir / "task.toml").write_text("[metadata\n")
    with pytest.raises(TaskError, match=r"task\.toml: invalid TOML"):
        load_task(task_dir)


def test_unknown_keys_are_noticed_not_refused(tmp_path: Path) -> None:
    """Harbor ignores keys its schema lacks; agentmeter does too, but says so, naming file and
    key (Task.loader_notes), while a known key of the wrong type is still an error."""
    task_dir = copy_task(HARBOR, tmp_path)
    toml = task_dir / "task.toml"
    original = toml.read_text()
    toml.write_text(original + "\n[enviroment]\ncpus = 2\n")
    notes = load_task(task_dir).loader_notes
    assert any(f"{toml}: enviroment: unknown key, ignored" in n for n in notes), notes
    unknown = load_task(BAD / "unknown-key")
    assert any("environment.cpu: unknown key" in n for n in unknown.loader_notes)
    toml.write_text(original.replace("[verifier]\n", "[verifier]\nfuture_key = 1\n"))
    assert any("verifier.future_key: unknown key" in n for n in load_task(task_dir).loader_notes)
    toml.write_text(original.replace("[verifier]\n", '[verifier]\nenvironment_mode = "later"\n'))
    with pytest.raises(TaskError, match=r"task\.toml: verifier\.environment_mode"):
        load_task(task_dir)
    toml.write_text(original + '\n[scenario]\nmax_attempt = 2\n')  # agentmeter's own: strict
    with pytest.raises(TaskError, match=r"scenario\.max_attempt: unknown key"):
        load_task(task_dir)


def test_current_harbor_keys_are_understood(tmp_path: Path) -> None:
    """Keys of Harbor's current schema load: collect hooks, healthcheck, environment_mode,
    skills_dir (ignored with a notice), the pre-1.3 multi_step_reward_mode (dropped)."""
    task_dir = copy_task(HARBOR, tmp_path)
    toml = task_dir / "task.toml"
    original = toml.read_text()
    toml.write_text(original.replace("[verifier]\n", '[verifier]\nenvironment_mode = "shared"\n')
                    + '\n[[verifier.collect]]\ncommand = "git diff > /logs/artifacts/p"\n'
                    'timeout_sec = 5\n\n[environment.healthcheck]\ncommand = "true"\nretries = 1\n')
    task = load_task(task_dir)
    assert task.collect[0].command == "git diff > /logs/artifacts/p"
    assert task.collect[0].timeout_s == 5 and task.healthcheck is not None
    assert task.healthcheck.retries == 1 and not task.loader_notes
    toml.write_text(original.replace("[environment]\n", '[environment]\nskills_dir = "/s"\n'))
    assert any("environment.skills_dir: ignored" in n for n in load_task(task_dir).loader_notes)
    toml.write_text(original.replace("[verifier]\n", '[verifier]\nenvironment_mode = "shared"\n')
                    + "\n[verifier.environment]\ncpus = 1\n")
    with pytest.raises(TaskError, match="verifier.environment_mode"):
        load_task(task_dir)


def test_verifier_kind_and_pass_threshold(tmp_path: Path) -> None:
    """task.toml names the verifier kind (from the registry) and the pass threshold; an unknown
    kind or a threshold outside [0, 1] is refused at load time, naming the file and the key."""
    task_dir = copy_task(HARBOR, tmp_path)
    toml = task_dir / "task.toml"
    original = toml.read_text()

    def with_verifier(keys: str) -> None:
        toml.write_text(original.replace("[verifier]\n", f"[verifier]\n{keys}\n"))

    with_verifier('kind = "pytest"\npass_threshold = 0.5')
    task = load_task(task_dir)
    assert (task.verifier_kind, task.pass_threshold) == ("pytest", 0.5)
    with_verifier('kind = "rubrik"')
    with pytest.raises(TaskError, match=r"task\.toml: verifier\.kind: unknown verifier kind "
                       r"'rubrik' \(known: difftest, mlebench, pytest, reward-file, rubric, "
                       r"swebench, swelancer, sweperf; or package\.module:Class\)"):
        load_task(task_dir)
    with_verifier("pass_threshold = 1.5")
    with pytest.raises(TaskError, match=r"task\.toml: verifier\.pass_threshold: "):
        load_task(task_dir)


def test_both_formats_is_ambiguous(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path)
    shutil.copy(TB / "task.yaml", task_dir / "task.yaml")
    with pytest.raises(TaskError, match="cannot tell the task format"):
        load_task(task_dir)


def test_bad_task_directory_name(tmp_path: Path) -> None:
    task_dir = copy_task(HARBOR, tmp_path, name="has:colon")
    with pytest.raises(TaskError, match="task directory names"):
        load_task(task_dir)


def test_suite_of_bad_tasks_collects_every_problem() -> None:
    """--strict: every problem of every task in one error."""
    with pytest.raises(TaskError) as exc:
        load_suite(BAD, strict=True)
    files = {p.file.parent.name if p.file.name != "test.sh" else p.file.parent.parent.name
             for p in exc.value.problems}
    assert {"missing-instruction", "missing-tests", "bad-values", "gpu-task",
            "tb-no-run-tests", "tb-multi-service"} <= files
    assert str(exc.value).startswith(f"{len(exc.value.problems)} problems:")


def test_one_bad_task_never_blocks_a_suite() -> None:
    """Without --strict the tasks that load are the suite; each one that does not is skipped
    with its reason (naming its file and key)."""
    suite = load_suite(BAD)
    assert suite.task_ids == ["unknown-key"]
    skipped = {k.id: k.reason for k in suite.skipped}
    assert set(skipped) == {"missing-instruction", "missing-tests", "bad-values", "gpu-task",
                            "tb-no-run-tests", "tb-multi-service"}
    assert "gpu-task/task.toml: environment.gpus" in skipped["gpu-task"]
    assert "run-tests.sh: missing" in skipped["tb-no-run-tests"]


def test_a_suite_none_of_whose_tasks_load_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "s"
    root.mkdir()
    shutil.copytree(BAD / "gpu-task", root / "gpu-task")
    shutil.copytree(BAD / "missing-tests", root / "missing-tests")
    with pytest.raises(TaskError, match=r"none of the suite's 2 tasks loaded") as exc:
        load_suite(root)
    assert "environment.gpus" in str(exc.value) and "test.sh: missing" in str(exc.value)


# --- suites --------------------------------------------------------------------------------


def make_suite(root: Path, suite_toml: str | None = None) -> Path:
    root.mkdir()
    copy_task(HARBOR, root, "alpha")
    copy_task(TB, root, "beta")
    copy_task(HARBOR, root, "gamma")
    (root / "_shared").mkdir()  # helpers, not a task
    if suite_toml is not None:
        (root / "suite.toml").write_text(suite_toml)
    return root


def test_suite_dir_with_subsets(tmp_path: Path) -> None:
    root = make_suite(tmp_path / "s", 'name = "mini"\nversion = "2"\ndescription = "d"\n'
                      '[subsets]\nquick = ["alpha", "beta"]\n')
    suite = load_suite(root)
    assert suite.name == "mini" and suite.version == "2"
    assert suite.task_ids == ["alpha", "beta", "gamma"]
    assert [t.format for t in suite.tasks] == ["native", "terminal-bench", "native"]
    assert [t.id for t in suite.select("quick")] == ["alpha", "beta"]
    assert [t.id for t in suite.select("quick", ["beta"])] == ["beta"]
    assert [r.suite for r in suite.task_records()] == ["mini"] * 3
    with pytest.raises(TaskError, match="no subset 'slow'"):
        suite.select("slow")
    with pytest.raises(TaskError, match="unknown task ids"):
        suite.select(task_ids=["zeta"])


def test_suite_without_suite_toml_is_named_after_dir(tmp_path: Path) -> None:
    suite = load_suite(make_suite(tmp_path / "plain"))
    assert suite.name == "plain" and suite.subsets == {}


def test_suite_subset_with_unknown_id(tmp_path: Path) -> None:
    root = make_suite(tmp_path / "s", '[subsets]\nquick = ["alpha", "nope"]\n')
    expected = r"suite\.toml: subsets\.quick: unknown task ids \['nope'\]"
    with pytest.raises(TaskError, match=expected):
        load_suite(root)


def test_suite_toml_unknown_key(tmp_path: Path) -> None:
    root = make_suite(tmp_path / "s", 'nme = "x"\n')
    with pytest.raises(TaskError, match=r"suite\.toml: nme: unknown key"):
        load_suite(root)


def test_suite_with_non_task_subdir(tmp_path: Path) -> None:
    root = make_suite(tmp_path / "s")
    (root / "docs").mkdir()
    assert [(k.id, "not a task" in k.reason) for k in load_suite(root).skipped] == [("docs", True)]
    with pytest.raises(TaskError, match=r"docs: not a task"):
        load_suite(root, strict=True)


def test_duplicate_task_ids_across_sources(tmp_path: Path) -> None:
    a = make_suite(tmp_path / "a")
    b = tmp_path / "b"
    b.mkdir()
    copy_task(HARBOR, b, "alpha")
    with pytest.raises(TaskError, match="duplicate task id 'alpha'"):
        load_suites([a, b])
    combined = load_suites([a, HARBOR])
    assert combined.task_ids == ["alpha", "beta", "gamma", "harbor-task"]


def test_single_task_dir_is_a_suite_of_one() -> None:
    suite = load_suite(HARBOR)
    assert suite.name == "harbor-task" and suite.task_ids == ["harbor-task"]


def test_neither_task_nor_suite(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="neither a task"):
        load_suite(tmp_path / "empty")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(TaskError, match="not a directory"):
        load_suite(tmp_path / "file.txt")
    with pytest.raises(TaskError, match="no such directory or built-in suite"):
        load_suite("no-such-suite-anywhere")


def test_builtin_suite_by_name() -> None:
    names = builtin_suite_names()
    if "starter" not in names:
        pytest.skip("the built-in starter suite is not in this checkout yet")
    suite = load_suite("starter")
    assert suite.builtin and suite.tasks
    assert all(t.has_solution for t in suite.tasks)


# --- pytest -rA summaries ------------------------------------------------------------------

PYTEST_OUTPUT = """\
============================= test session starts ==============================
collected 5 items

tests/test_outputs.py ..F.E                                              [100%]

=================================== FAILURES ===================================
PASSED tests/test_outputs.py::test_not_in_summary
=========================== short test summary info ============================
PASSED tests/test_outputs.py::test_a
PASSED tests/test_outputs.py::test_b[x - y]
FAILED tests/test_outputs.py::test_c - AssertionError: assert 1 == 2
PASSED tests/test_outputs.py::test_d
ERROR tests/test_outputs.py::test_d - RuntimeError: teardown broke
SKIPPED [1] tests/test_outputs.py:40: no network
XFAIL tests/test_outputs.py::test_e - known bug
==================== 1 failed, 3 passed, 1 error in 0.10s ======================
"""


def test_pytest_summary_outcomes() -> None:
    results = parse_pytest_output(PYTEST_OUTPUT)
    assert results.found_summary
    assert results.outcomes == {
        "tests/test_outputs.py::test_a": "passed",
        "tests/test_outputs.py::test_b[x - y]": "passed",
        "tests/test_outputs.py::test_c": "failed",
        "tests/test_outputs.py::test_d": "error",
        "tests/test_outputs.py::test_e": "xfailed",
    }
    assert results.skipped == 1
    assert results.reward == 0.0
    assert results.fraction == pytest.approx(2 / 4)


def test_pytest_all_passed_and_empty() -> None:
    ok = parse_pytest_output("\x1b[32m===== short test summary info =====\x1b[0m\n"
                             "\x1b[32mPASSED\x1b[0m t.py::test_one\n===== 1 passed =====\n")
    assert ok.reward == 1.0 and ok.fraction == 1.0
    none = parse_pytest_output("ERROR: file or directory not found: tests/\n")
    assert none.outcomes == {} and none.reward == 0.0 and none.fraction == 0.0
    collection = parse_pytest_output("=== short test summary info ===\n"
                                     "ERROR tests/test_x.py - ImportError: no module\n")
    assert collection.outcomes == {"tests/test_x.py": "error"} and collection.reward == 0.0


def test_network_modes_resolve_as_harbor_resolves_them(tmp_path: Path) -> None:
    """allowlist (explicit, or implied by allowed_hosts) fills Task.allowed_hosts, normalised;
    the agent phase overrides the environment's baseline; a verifier phase that differs is not
    run (one sandbox, one policy)."""
    task_dir = copy_task(HARBOR, tmp_path)
    toml = task_dir / "task.toml"
    original = toml.read_text()

    def with_env(keys: str, tail: str = "") -> None:
        toml.write_text(original.replace("[environment]\n", f"[environment]\n{keys}\n") + tail)

    with_env('network_mode = "allowlist"\nallowed_hosts = ["PyPI.org.", "*.example.com", "pypi.org"]')
    task = load_task(task_dir)
    assert (task.allow_internet, task.allowed_hosts) == (False, ("pypi.org", "*.example.com"))
    with_env('allowed_hosts = ["a.test"]',
             '\n[verifier]\nallowed_hosts = ["a.test"]\n' if "[verifier]" not in original else "")
    if "[verifier]" in original:
        toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nallowed_hosts = ["a.test"]\n'))
    assert load_task(task_dir).allowed_hosts == ("a.test",)
    with_env('network_mode = "public"')
    assert load_task(task_dir).allow_internet
    with_env('network_mode = "allowlist"')  # no hosts: no network at all
    task = load_task(task_dir)
    assert (task.allow_internet, task.allowed_hosts) == (False, ())
    toml.write_text(original.replace("[verifier]\n", '[verifier]\nnetwork_mode = "public"\n'))
    task = load_task(task_dir)  # the verifier's own network: the sandbox's switched to it
    assert task.verifier_network is not None and task.verifier_network.allow_internet
    assert verifier_network_label(task) == "public" != network_label(task)
    with_env('network_mode = "public"\nallowed_hosts = ["a.test"]')
    with pytest.raises(TaskError, match=r"environment\.allowed_hosts"):
        load_task(task_dir)


@pytest.mark.parametrize("how", ["absolute", "dotdot", "link"])
def test_a_verifier_config_file_out_of_tests_is_not_read(tmp_path: Path, how: str) -> None:
    """Security review 3: ``difftest.cases`` (or a link in tests/) named any host file, read
    whole as root at load time (``/dev/zero`` filled the runner's memory) and its cases run;
    ``rubric.toml`` and the capture plan likewise."""
    from agentmeter.tasks.native import rubric_problems, verifier_file_problems
    from agentmeter.verify.difftest.config import DifftestConfig

    host = tmp_path / "host-cases.jsonl"
    host.write_text('{"id": "c1", "class": "c01", "command": "cat /etc/shadow"}\n')
    tests = tmp_path / "task" / "tests"
    tests.mkdir(parents=True)
    cases = {"absolute": str(host), "dotdot": "../../host-cases.jsonl", "link": "cases.jsonl"}[how]
    if how == "link":
        (tests / "cases.jsonl").symlink_to(host)
    cfg = DifftestConfig(cli_name="greet", language="python", cases=cases)
    problems = verifier_file_problems("difftest", cfg, [tests])
    assert [p.field for p in problems] == ["difftest.cases"]
    assert "leading out of the task" in problems[0].message
    (tests / "rubric.toml").symlink_to(host)
    assert "leading out of the task" in str(rubric_problems(tests)[0])


def test_a_copy_source_through_a_path_max_chain_is_refused(tmp_path: Path) -> None:
    """Security review 3: COPY sources are confined to the build context by resolve(), which
    a chain of links past PATH_MAX fooled (the runner copies as root into the agent's image)."""
    from agentmeter.sandbox.dockerfile import DockerStep
    from agentmeter.sandbox.layer_steps import copy_sources
    from agentmeter.sandbox.spec import LayerBuildError, LayerSpec

    secret = tmp_path / "host-secret"
    secret.write_text("HOST-SECRET-1234\n")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    plant_long_chain(ctx, "leak", secret)
    assert (ctx / "leak").read_text() == "HOST-SECRET-1234\n"
    layer = LayerSpec(kind="dockerfile", source="", context=ctx)
    with pytest.raises(LayerBuildError, match="outside the build context"):
        copy_sources(DockerStep(kind="COPY", line=1, text="COPY leak /x", args=("leak", "/x")),
                     layer)


@pytest.mark.parametrize("rel", ["steps/identify/workdir", "steps/identify/tests", "tests"])
def test_a_scenario_directory_linked_out_of_the_task_is_refused(tmp_path: Path, rel: str) -> None:
    """Security review 3: a multi-step task's step ``workdir/`` (copied into the agent's
    directory), a step's ``tests/`` or the shared ``tests/`` linked to a host directory copied
    that directory into the sandbox (review 2 covered single-step tasks only)."""
    from agentmeter.tasks.scenario import load_scenario
    from agentmeter.tasks.suite import BUILTIN_SUITES_DIR

    host = tmp_path / "host-dir"
    host.mkdir()
    (host / "id_rsa").write_text("HOST-SECRET-1234\n")
    task_dir = tmp_path / "company-research"
    shutil.copytree(BUILTIN_SUITES_DIR / "agency" / "company-research", task_dir)
    if (task_dir / rel).exists():
        shutil.rmtree(task_dir / rel)
    (task_dir / rel).symlink_to(host)
    with pytest.raises(TaskError) as exc:
        load_scenario(task_dir)
    assert "a symbolic link leading out of the task" in problems_text(exc)
