"""Shared test setup: test-only models importable as `calibration_models:...`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run in an empty folder, as a user would (the default storage lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_collection_modifyitems(items: Any) -> None:
    """The slow tests first: with one worker per core, a long test started last is the run's
    tail; started first, the short ones fill in around it."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
