"""agentmeter.importers: other harnesses' trial data into the store.

Harbor job directories, Terminal-Bench v1 run directories, CLI-Tool-Bench's released
``results_metadata_with_sp.json``, and generic per-trial tables (CSV / JSON Lines / Parquet)
with a TOML column mapping. An imported run lives in the store like
a native one (``RunRecord.source`` = the importer's name, status "imported") and scores the same
way. Exports (the other direction) are :mod:`agentmeter.exporters`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agentmeter.lazy import lazy_exports

# The importers are imported when a format is read, not with the package: a submodule
# (``agentmeter.importers.agencybench``, say) imports without the store and the other formats.
if TYPE_CHECKING:
    from agentmeter.importers.common import ImportedRun, ImportFormatError
    from agentmeter.importers.mapping import Mapping
    from agentmeter.store.db import Store

#: name -> the module that defines it
_LAZY: dict[str, str] = {"ImportFormatError": "agentmeter.importers.common",
                         "ImportedRun": "agentmeter.importers.common",
                         "Mapping": "agentmeter.importers.mapping"}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

FORMATS = ("harbor", "terminal-bench", "clitoolbench", "table")


def detect_format(path: Path) -> str:
    from agentmeter.importers.clitoolbench import looks_like_clitoolbench
    from agentmeter.importers.common import ImportFormatError
    from agentmeter.importers.harbor import looks_like_harbor
    from agentmeter.importers.table import TABLE_SUFFIXES
    from agentmeter.importers.terminal_bench import looks_like_terminal_bench

    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or directory")
    if path.is_file() and path.suffix.lower() in TABLE_SUFFIXES:
        return "table"
    if looks_like_clitoolbench(path):
        return "clitoolbench"
    if looks_like_terminal_bench(path):
        return "terminal-bench"
    if looks_like_harbor(path):
        return "harbor"
    raise ImportFormatError(f"{path}: cannot tell the format (a Harbor job directory, a "
                            "Terminal-Bench run directory with results.json, CLI-Tool-Bench's "
                            "results_metadata*.json, or a .csv/.jsonl/.parquet table); pass "
                            "--format")


def load_import(path: Path, fmt: str | None = None, mapping: Mapping | None = None,
                run_id: str | None = None, categories: Path | None = None,
                include_excluded: bool = False) -> ImportedRun:
    """Read a source into records (nothing is written). ``categories`` and
    ``include_excluded`` are for the clitoolbench format only."""
    from agentmeter.importers.clitoolbench import import_clitoolbench
    from agentmeter.importers.common import ImportFormatError
    from agentmeter.importers.harbor import import_harbor
    from agentmeter.importers.table import import_table
    from agentmeter.importers.terminal_bench import import_terminal_bench

    fmt = fmt or detect_format(path)
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or directory")
    if fmt != "clitoolbench" and (categories is not None or include_excluded):
        raise ImportFormatError("--categories and --include-excluded are for --format "
                                "clitoolbench")
    if fmt == "harbor":
        return import_harbor(path, mapping, run_id)
    if fmt == "terminal-bench":
        return import_terminal_bench(path, mapping, run_id)
    if fmt == "clitoolbench":
        return import_clitoolbench(path, mapping, run_id, categories, include_excluded)
    if fmt == "table":
        return import_table(path, mapping, run_id)
    raise ImportFormatError(f"unknown import format {fmt!r} ({', '.join(FORMATS)})")


def save_import(store: Store, imported: ImportedRun) -> None:
    """Write the run in one transaction. A configuration id already in the store must name the
    same model and agent (ids are digests of the definition; the stored record is kept)."""
    from agentmeter.store.db import StoreError

    for c in imported.configs:
        known = store.get_config(c.id)
        if known is not None and (known.model.name, known.agent.name) != (c.model.name,
                                                                          c.agent.name):
            raise StoreError(f"configuration id {c.id!r} is already in {store.where} as "
                             f"{known.label!r}, not {c.label!r}")
    store.import_run(imported.run, imported.configs, imported.tasks, imported.trials)


__all__ = ["FORMATS", "ImportFormatError", "ImportedRun", "Mapping", "detect_format",
           "load_import", "save_import"]
