"""Release importers store each dataset's record: item kind, scale, categories, question (issue 20).

The records are read back through the one reader, :func:`personagap.datasets.dataset_records`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from personagap.datasets import dataset_records
from personagap.human_data.recenter import PILOT, STAGE2
from personagap.records import DEFAULT_QUESTIONS, PAIRWISE_LABELS, DatasetRecord
from personagap.stages.extraction import import_extraction, import_laps
from personagap.store import opened, set_meta
from tests.support.release_builders import IMPORTERS, write_release


def _records(db: Path) -> dict[tuple[str, str], DatasetRecord]:
    with duckdb.connect(str(db), read_only=True) as con:
        return dataset_records(con)


def test_recenter_records_say_what_raters_answered(recenter_db: Path) -> None:
    records = _records(recenter_db)
    expected = {("relevance", STAGE2): ("relevance", "nominal", ("no", "yes")),
                ("response", STAGE2): ("pairwise", "pairwise", PAIRWISE_LABELS),
                ("relevance", PILOT): ("relevance", "nominal", ("no", "yes")),
                ("extraction", PILOT): ("verification", "nominal", ("bad", "ok", "unsure"))}
    for key, (kind, scale, categories) in expected.items():
        record = records[key]
        assert record.declared, key
        assert (record.item_kind, record.scale.kind, record.scale.categories) == (kind, scale, categories), key
        assert record.origin == "real"
    # The pilot's 3-way task-2 rating is another question: not a category of the pilot's relevance scale.
    assert "necessary_explicit" not in records[("relevance", PILOT)].scale.categories
    assert "3 crowd annotators" in records[("relevance", STAGE2)].question
    assert "3-way" in records[("relevance", PILOT)].question


def test_laps_record(shared_data: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    import_laps(shared_data / "laps" / "movie_dataset_val.json", db)
    record = _records(db)[("extraction", "laps")]
    assert record.declared and record.item_kind == "verification" and "Gold" in record.question


def test_team_extraction_record_keeps_the_origin_the_team_gave(tmp_path: Path) -> None:
    files = IMPORTERS["extraction"].build()
    root = write_release(tmp_path / "team", files)
    db = tmp_path / "db.duckdb"
    import_extraction(root, db)
    datasets = {d for (stage, d) in _records(db) if stage == "extraction"}
    assert datasets
    for dataset in datasets:
        record = _records(db)[("extraction", dataset)]
        assert record.declared and record.question == DEFAULT_QUESTIONS[("extraction", "verification")]
    dataset = sorted(datasets)[0]
    with opened(db) as con:  # what `import labels --origin synthetic` records for the dataset
        set_meta(con, {f"origin:{dataset}": "synthetic"})
    import_extraction(root, db)  # re-importing the team's files does not call its users real
    assert _records(db)[("extraction", dataset)].origin == "synthetic"
