"""Private copies of the session's shared release stores (tests/conftest.py), for tests that write."""

from __future__ import annotations

import shutil
from pathlib import Path


def copy_store(source: Path, target: Path) -> Path:
    """Copy the store ``source`` to ``target`` (a file path, or a folder to hold it under its own name)."""
    if target.is_dir():
        target = target / source.name
    shutil.copy(source, target)
    return target
