"""Stage 1 adapters: the real LAPS release, the extraction JSONL format, and malformed files (nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from personagap.human_data import DataError
from personagap.human_data.extraction import load_extraction
from personagap.human_data.laps import load_laps
from personagap.sample_extraction import sample_extraction_rows, write_sample_extraction
from personagap.stages.extraction import import_extraction, import_laps
from tests.support.paths import FIXTURES

BAD = FIXTURES / "extraction_bad"
EXPECTED = json.loads((BAD / "expected.json").read_text())


def test_real_laps_counts(shared_data: Path):
    result = load_laps(shared_data / "laps")
    assert len(result.files) == 4
    assert sum(result.files.values()) == 132 + 19 + 347 + 50
    assert result.sessions == 290 + 46 + 691 + 97
    assert result.sessions_without_preferences == 4 + 15  # the release has sessions with "preferences": {}
    kinds = [i.payload["kind"] for i in result.batch.items.values()]
    assert kinds.count("conversation") == result.sessions
    assert kinds.count("gold") == result.gold > 9000
    # Workers are disjoint between train and val within a topic; units are <topic>/<worker_id>.
    splits: dict[str, set[str]] = {}
    for it in result.batch.items.values():
        splits.setdefault(it.payload["unit"], set()).add(it.payload["split"])
    assert all(len(s) == 1 for s in splits.values())
    one = next(i for i in result.batch.items.values() if i.payload["kind"] == "conversation")
    assert one.payload["turns"][0]["turn_id"] == "s0t0"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_fixture_names_location_and_writes_nothing(name: str, tmp_path: Path):
    path = BAD / name if (BAD / name).is_dir() else BAD / f"{name}.jsonl"
    db = tmp_path / "x.duckdb"
    importer = import_laps if name.startswith("laps_") else import_extraction
    with pytest.raises(DataError) as err:
        importer(path, db)
    message = str(err.value)
    assert EXPECTED[name] in message, message
    assert str(path) in message or path.name in message
    assert not db.exists()  # validation fails before the store is even opened


def test_import_is_atomic_when_db_exists(tmp_path: Path):
    db = tmp_path / "x.duckdb"
    laps_dir, jsonl = write_sample_extraction(tmp_path / "s")
    import_laps(laps_dir, db)
    before = duckdb.connect(str(db), read_only=True).execute("SELECT count(*) FROM items").fetchone()[0]
    with pytest.raises(DataError):
        import_extraction(BAD / "jsonl_unknown_turn_id.jsonl", db)  # its first row is valid: still not written
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM items").fetchone()[0] == before
    assert con.execute("SELECT count(*) FROM users WHERE user_id = 'u0'").fetchone()[0] == 0


def test_sample_jsonl_round_trip_and_idempotent(tmp_path: Path):
    _, jsonl = write_sample_extraction(tmp_path / "s")
    result = load_extraction(jsonl)
    rows = sample_extraction_rows()
    n_attr = sum(len(r["attributes"]) for r in rows)
    assert result.attributes == n_attr and result.verdicts == 3 * n_attr
    assert result.gold == sum(len(r["gold"]) for r in rows)
    kinds = [i.payload["kind"] for i in result.batch.items.values()]
    assert kinds.count("chunk") == len(rows) and kinds.count("extracted") == n_attr
    # One "chunk" label per row records the extractor's whole answer, so a user with no attribute still counts.
    chunk_labels = [lab for lab in result.batch.labels if lab.rater == "sample-extractor"]
    assert len(chunk_labels) == len(rows) and all(json.loads(lab.label) for lab in chunk_labels)
    db = tmp_path / "x.duckdb"
    import_extraction(jsonl, db)
    import_extraction(jsonl, db)
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM labels").fetchone()[0] == len(result.batch.labels)


def test_jsonl_integer_turn_ids_and_conflicting_conversation(tmp_path: Path):
    base = {"user_id": "u", "extractor": "e1", "conversation": [{"turn_id": 1, "role": "User", "text": "I surf."}],
            "attributes": [{"attribute": "The user surfs.", "turn_ids": [1]}]}
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(base) + "\n")
    item = next(i for i in load_extraction(path).batch.items.values() if i.payload["kind"] == "extracted")
    assert item.payload["turn_ids"] == ["1"]
    other = dict(base, extractor="e2", conversation=[{"turn_id": 1, "role": "User", "text": "I ski."}])
    path.write_text(json.dumps(base) + "\n" + json.dumps(other) + "\n")
    with pytest.raises(DataError, match=r"a\.jsonl:2: field 'conversation': differs"):
        load_extraction(path)
