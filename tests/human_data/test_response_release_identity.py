"""Stage-3 releases keep their identity when moved (issue 20, defect 6): PRISM, USR.

The real release is imported, then a copy in a tmp folder (never in the repository) with one file cut to a
few rows: the store follows the copy. Expected counts are recounted from the files themselves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb

from personagap.stages.response import import_prism, import_usr

KEPT = 10


def _labels_of_run(db: Path, source_name: str) -> int:
    with duckdb.connect(str(db), read_only=True) as con:
        return int(con.execute("""
            SELECT count(*) FROM labels l JOIN runs r USING (run_id)
            WHERE r.kind = 'import' AND r.source LIKE '%' || ?
        """, [source_name]).fetchall()[0][0])


def test_prism_copy_with_a_cut_file_replaces_the_release(shared_data: Path, tmp_path: Path) -> None:
    original = shared_data / "prism_judge"
    name = sorted(p.name for p in original.glob("prism_*gpt-4o*.jsonl"))[0]
    db = tmp_path / "s.duckdb"
    import_prism(original, db)
    full = _labels_of_run(db, name)
    copy = tmp_path / "elsewhere" / "prism_judge"
    shutil.copytree(original, copy)
    lines = [ln for ln in (copy / name).read_text(encoding="utf-8").splitlines() if ln.strip()][:KEPT]
    (copy / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    import_prism(copy, db)
    # The judge's labels of that file: one per kept row (the human label is a separate row of the pair item).
    judge_rows = sum(1 for ln in lines if json.loads(ln))
    after = _labels_of_run(db, name)
    assert full > after and after <= 2 * judge_rows
    with duckdb.connect(str(db), read_only=True) as con:
        # Every stored import run comes from the copy: the original folder's runs were replaced, not kept.
        sources = {r[0] for r in con.execute("SELECT source FROM runs WHERE kind = 'import'").fetchall()}
    assert sources and all(str(copy) in s for s in sources)


def test_usr_copy_replaces_the_release(shared_data: Path, tmp_path: Path) -> None:
    original = shared_data / "usr_personachat"
    db = tmp_path / "s.duckdb"
    import_usr(original, db)
    copy = tmp_path / "moved" / "usr"
    shutil.copytree(original, copy)
    data = json.loads((copy / "pc_usr_data.json").read_text(encoding="utf-8"))
    (copy / "pc_usr_data.json").write_text(json.dumps(data[:3]), encoding="utf-8")
    import_usr(copy, db)
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT source FROM runs WHERE kind = 'import'").fetchall()
        contexts = con.execute("SELECT count(DISTINCT payload->>'context') FROM items").fetchall()[0][0]
    assert len(runs) == 1 and str(copy) in runs[0][0]
    assert contexts == 3
