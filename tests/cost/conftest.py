"""The cost tests plan shipped configurations with the workflow tests' helpers
(tests/workflow/workflow_helpers.py). Pytest's default import mode puts only a test file's own
folder on sys.path, so that folder is added here, once, for this package's tests."""

from __future__ import annotations

import sys
from pathlib import Path

WORKFLOW_TESTS = str(Path(__file__).resolve().parents[1] / "workflow")
if WORKFLOW_TESTS not in sys.path:
    sys.path.append(WORKFLOW_TESTS)
