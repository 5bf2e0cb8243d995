"""The report's end-to-end tests run the workflow with the workflow tests' helpers
(tests/workflow/workflow_helpers.py: a copy of the workflow files, real Snakemake runs, the SMALL
configuration). Pytest's default import mode puts only a test file's own folder on sys.path, so
that folder is added here, once, for this package's tests: one copy of the helpers, not two."""

from __future__ import annotations

import sys
from pathlib import Path

WORKFLOW_TESTS = str(Path(__file__).resolve().parents[1] / "workflow")
if WORKFLOW_TESTS not in sys.path:
    sys.path.append(WORKFLOW_TESTS)
