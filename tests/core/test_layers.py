"""The layer contract (.importlinter, checked by .ci/layers): it passes on the repository and catches an upward import.

Each planted module is copied over the throw-away tree .ci/layers builds (``--overlay``), never into the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _layers(overlay: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    args = ["bash", str(REPO / ".ci" / "layers"), *(["--overlay", str(overlay)] if overlay else [])]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, check=False)


def _plant(tmp_path: Path, module: str, source: str) -> Path:
    path = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    return tmp_path


def test_the_repository_keeps_both_contracts() -> None:
    done = _layers()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 2 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(("module", "source", "named"), [
    # The store imports a stage: upward, at module level.
    ("personagap.store._planted_upward", "from personagap.stages import relevance\n", "personagap.stages"),
    # The same inside a function: import-linter sees function-level imports too.
    ("personagap.store._planted_upward", "def f():\n    from personagap.cli import main\n    return main\n",
     "personagap.cli"),
    # A module inside a folder the install maps (analysis/ is personagap.analysis): the graph sees it.
    ("personagap.analysis._planted_upward", "import personagap.judges.runner\n", "personagap.judges"),
    # judges and human_data are independent of each other.
    ("personagap.judges._planted_sideways", "from personagap.human_data import labels\n", "personagap.human_data"),
    # The bottom layer (records and rules) imports the store: an existing module, replaced in the tree by a copy
    # with one more line.
    ("personagap.stage_names", (REPO / "personagap" / "stage_names.py").read_text(encoding="utf-8")
     + "\nimport personagap.store.queries  # planted\n", "personagap.store"),
])
def test_a_planted_forbidden_import_breaks_the_contract(tmp_path: Path, module: str, source: str,
                                                        named: str) -> None:
    own = REPO.joinpath(*module.split(".")).with_suffix(".py")
    before = own.read_bytes() if own.exists() else None
    done = _layers(_plant(tmp_path, module, source))
    assert (own.read_bytes() if own.exists() else None) == before  # planted in the tree only, never the repository
    assert done.returncode != 0, done.stdout
    out = done.stdout + done.stderr
    assert "BROKEN" in out and module in out and named in out


def test_an_unlayered_new_module_is_refused(tmp_path: Path) -> None:
    done = _layers(_plant(tmp_path, "personagap.unplaced", "X = 1\n"))
    assert done.returncode != 0
    assert "personagap.unplaced" in done.stdout + done.stderr


def test_constants_the_store_holds_are_the_vocabulary_s() -> None:
    # One definition (personagap.vocabulary); the store's and the stages' names are that object, not a copy.
    from personagap import vocabulary
    from personagap.records import VERIFICATION_LABELS
    from personagap.stages.extraction_records import ATTRIBUTE_KINDS
    from personagap.store.pipeline_counts import ATTRIBUTE_KINDS as STORE_ATTRIBUTE_KINDS
    from personagap.store.pipeline_counts import VERDICTS

    assert STORE_ATTRIBUTE_KINDS is ATTRIBUTE_KINDS is vocabulary.ATTRIBUTE_KINDS
    assert VERIFICATION_LABELS is VERDICTS is vocabulary.VERIFICATION_LABELS
