"""Shared fixtures: the real human data in ../shared/data, and databases built from it.

Each real release is imported once per session (once per xdist worker) into its own store: ``recenter_db``,
``prism_release_db``, ``usr_release_db`` and ``laps_release_db``. They are shared: never write to them; copy one
first (:func:`tests.support.stores.copy_store`, or ``recenter_db_copy``).

Tests never touch the network: DSPy/LiteLLM are kept offline by environment
variables set before anything imports them, and every LLM test talks to a server
on 127.0.0.1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Before dspy/litellm are imported anywhere: no model-cost-map download, no cache in $HOME.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PERSONAGAP_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real human data. Missing data is an error, never a skip: CI must exercise it."""
    if not (SHARED_DATA / "recenter").is_dir():
        pytest.fail(f"real human data not found at {SHARED_DATA} (set PERSONAGAP_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def recenter_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the whole Re-Centering release imported (built once per session; copy before writing)."""
    from personagap.api import import_recenter

    db = tmp_path_factory.mktemp("recenter") / "recenter.duckdb"
    import_recenter(shared_data / "recenter", db)
    return db


@pytest.fixture
def recenter_db_copy(recenter_db: Path, tmp_path: Path) -> Path:
    """A private, writable copy of :func:`recenter_db`."""
    import shutil

    target = tmp_path / "recenter.duckdb"
    shutil.copy(recenter_db, target)
    return target


@pytest.fixture(scope="session")
def prism_release_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the whole PRISM judge release imported (once per session; copy before writing)."""
    from personagap.stages.response import import_prism

    db = tmp_path_factory.mktemp("prism-release") / "prism.duckdb"
    import_prism(shared_data / "prism_judge", db)
    return db


@pytest.fixture(scope="session")
def usr_release_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the whole USR PersonaChat release imported (once per session; copy before writing)."""
    from personagap.stages.response import import_usr

    db = tmp_path_factory.mktemp("usr-release") / "usr.duckdb"
    import_usr(shared_data / "usr_personachat", db)
    return db


@pytest.fixture(scope="session")
def laps_release_db(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the whole LAPS release imported (once per session; copy before writing)."""
    from personagap.stages.extraction import import_laps

    db = tmp_path_factory.mktemp("laps-release") / "laps.duckdb"
    import_laps(shared_data / "laps", db)
    return db
