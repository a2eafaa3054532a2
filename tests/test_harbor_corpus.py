"""Harbor's own example tasks (``../shared/corpora/harbor-examples``, unmodified) as the
acceptance test: a subset that needs nothing this host cannot reach and builds without package
downloads, run with oracle and nop on the local backend through ``tasks check``. The full corpus
takes far longer than a test may: ``benchmarks/harbor_corpus.py`` runs it on a chosen backend and
compares every trial's outcome and reason with ``benchmarks/harbor_corpus_expected.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentmeter.cli import app

CORPUS = Path(os.environ.get("AGENTMETER_HARBOR_CORPUS",
                             Path(__file__).resolve().parents[2] / "shared" / "corpora"
                             / "harbor-examples"))


@pytest.mark.slow
@pytest.mark.skipif(not (CORPUS / "verifier-mode-matrix").is_dir(),
                    reason=f"Harbor's example corpus is not at {CORPUS}")
def test_verifier_mode_matrix_as_harbor_runs_it(tmp_path: Path) -> None:
    """Every task of verifier-mode-matrix (shared, separate and mixed verifiers, single- and
    multi-step): the oracle passes every step and nop none."""
    res = CliRunner().invoke(app, ["tasks", "check", str(CORPUS / "verifier-mode-matrix"),
                                   "--json", "--store", str(tmp_path / "runs")])
    out = json.loads(res.stdout)
    assert (out["tasks"], out["ran"], out["broken"], out["trivial"], out["skipped"]) == \
        (13, 13, [], [], []), out
