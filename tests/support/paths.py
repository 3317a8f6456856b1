"""Where things are, for tests in any folder: the repository, the tests' fixture files, the dashboard app."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
APP = REPO / "dashboard" / "app.py"
