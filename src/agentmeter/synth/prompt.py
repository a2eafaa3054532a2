"""The instruction of a new CLI-generation task (spec §1.2 template, §3.3 last paragraph).

Rendered from the tool overview, the full ``--help`` text, one verified oracle sample per class
(command, preparation, the oracle's ``{exit_code, stdout, fs_diff}``) and the constraints (the
command name, the language, the one install command, stdout to match, a non-zero exit on
errors). A replacement map scrubs identifying names (authors, brands, the oracle's own command
name when the task renames it) from every part, longest key first, in one pass.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field

LANGUAGE_TEXT = {"python": "Python", "javascript": "JavaScript (Node.js)", "go": "Go"}
MANIFEST = {"python": "pyproject.toml or setup.py", "javascript": "package.json",
            "go": "go.mod"}


class Sample(BaseModel):
    """One verified positive case of a class with the oracle's result."""

    model_config = ConfigDict(extra="forbid")

    cls: str
    command: str
    prep_script: str = ""
    files: dict[str, str] = Field(default_factory=dict)
    stdin: str | None = None
    exit_code: int
    stdout: str
    fs_diff: dict[str, object] = Field(default_factory=dict)


class PromptInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cli_name: str
    repo_name: str
    language: str
    install: str
    overview: str = ""
    help_text: str = ""
    cwd: str = Field(default="/test_data", description="where the commands run")
    samples: list[Sample]
    descriptions: dict[str, str] = Field(default_factory=dict, description="class -> text")
    scrub: dict[str, str] = Field(default_factory=dict, description="identifying text -> "
                                  "replacement")


def scrubber(replacements: dict[str, str]) -> re.Pattern[str] | None:
    keys = sorted((k for k in replacements if k), key=lambda k: (-len(k), k))
    return re.compile("|".join(re.escape(k) for k in keys)) if keys else None


def scrub(text: str, replacements: dict[str, str]) -> str:
    """``text`` with every key of ``replacements`` replaced (longest first, no cascading)."""
    pattern = scrubber(replacements)
    return text if pattern is None else pattern.sub(lambda m: replacements[m.group(0)], text)


#: characters a fixture cannot show as plain text (all controls but tab and newline)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _files_text(sample: Sample) -> str:
    if not sample.files:
        return "  No files are created under `/test_data`.\n"
    lines = ["  These files are created under `/test_data` before the command runs:\n"]
    for rel, text in sorted(sample.files.items()):
        shown = text if len(text) <= 400 else text[:400] + "…"
        if _CONTROL.search(shown):  # CR, NUL, …: invisible or unsendable as they are
            lines.append(f"  - `/test_data/{rel}` (its content as a JSON string):\n"
                         f"    `{json.dumps(shown)}`\n")
            continue
        lines.append(f"  - `/test_data/{rel}`:\n    ```\n"
                     + "".join(f"    {line}\n" for line in shown.splitlines() or [""])
                     + "    ```\n")
    return "".join(lines)


def _sample_text(s: Sample, description: str) -> str:
    result = json.dumps({"exit_code": s.exit_code, "stdout": s.stdout, "fs_diff": s.fs_diff},
                        indent=4, ensure_ascii=False)
    prep = (f"  Then this preparation script runs in `/test_data`:\n  ```sh\n{s.prep_script}\n"
            "  ```\n" if s.prep_script.strip() else "")
    stdin = (f"  Standard input:\n  ```\n{s.stdin}\n  ```\n" if s.stdin is not None else "")
    desc = description.strip() or "See the help text for this command's parameters."
    return (f"#### Command Category: `{s.cls}`\n"
            f"- **Function and Parameter Description**:\n  {desc}\n"
            "- **Execution Context and Sample**:\n"
            f"  **1. Preparation**:\n{_files_text(s)}{prep}{stdin}"
            f"  **2. Command**:\n  `{s.command}`\n"
            f"  **3. Oracle Result**:\n  ```json\n{result}\n  ```\n")


def render(p: PromptInput) -> str:
    """The instruction text (scrubbed)."""
    lang = LANGUAGE_TEXT.get(p.language, p.language)
    manifest = MANIFEST.get(p.language, "the standard manifest")
    help_section = (f"<Help_Text>\nThe complete `--help` output of the tool, every command:\n"
                    f"```\n{p.help_text.rstrip()}\n```\n</Help_Text>\n" if p.help_text.strip()
                    else "")
    specs = "\n".join(_sample_text(s, p.descriptions.get(s.cls, "")) for s in p.samples)
    text = f"""<Role>
You are a senior software engineer. Using your tools, write a complete, globally installable
command-line tool repository from scratch in the current working directory, following the
requirements below.
</Role>
<Project_Overview>
**CLI Tool Name**: {p.cli_name}
**Repository Name**: {p.repo_name}
**Core Functionality Description**:
{p.overview.strip() or "See the help text and the command samples below."}
</Project_Overview>
{help_section}<Strict_Constraints>
The acceptance check fails on any violation of these constraints:
1. **Naming and Invocation**: the installed command must be named exactly `{p.cli_name}`.
2. **Language and Environment**: implement it entirely in **{lang}**; it must run in this
   environment (no network access; the package sources available here are the only ones).
3. **Dependencies and Installation**: the validator runs ONLY this one command in the
   repository root: `{p.install}`. Declare every dependency in {manifest}
   so that this command installs everything.
4. **Output Consistency**:
   - Normal cases: standard output must match the samples as strictly as possible.
   - Error cases (invalid input, missing arguments): standard error may differ, but the exit
     code MUST be non-zero.
</Strict_Constraints>
<Command_Specifications>
These are all the command categories to implement; commands not listed need not exist.
Each sample shows the preparation, the command and the reference tool's result (`fs_diff`:
files the command added, deleted or modified). Commands run with `{p.cwd}` as the working
directory.

{specs}</Command_Specifications>
<Execution_And_Stop_Criteria>
Write all files with your tools. Do not over-verify: stop when you are confident the tool
installs with `{p.install}` and behaves as specified.
</Execution_And_Stop_Criteria>
"""
    return scrub(text, p.scrub)
