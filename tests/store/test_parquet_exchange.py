"""`export` / `import parquet`: the store as Parquet and back, shards merged, broken exports refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.labels_api import dataset_origins, import_labels, load_labels
from tests.support.byo_data import team_rows, write_rows

STAGES = ("extraction", "relevance", "response")


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def reports(db: Path) -> dict[str, Any]:
    out = {}
    for stage in STAGES:
        result = invoke("report", stage, "--db", str(db), "--json")
        assert result.exit_code == 0, result.output
        out[stage] = json.loads(result.output)
    result = invoke("diagnose", "--db", str(db), "--json")
    assert result.exit_code == 0, result.output
    out["diagnose"] = json.loads(result.output)
    return out


def rounded(value: Any) -> Any:
    """The report with floats to 12 significant digits: a float sum's last bits follow SQL row order."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def same_contents(a: Path, b: Path) -> None:
    """Every table of ``b`` holds exactly ``a``'s rows (compared as sets of rows, both ways)."""
    with duckdb.connect() as con:
        con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
        for t in ("meta", "runs", "users", "attributes", "prompts", "items", "labels", "judge_cache"):
            for x, y in (("a", "b"), ("b", "a")):
                extra = con.execute(f"SELECT count(*) FROM (SELECT * FROM {x}.{t} EXCEPT ALL SELECT * FROM {y}.{t})"
                                    ).fetchall()[0][0]
                assert extra == 0, f"{t}: {extra} rows of {x} not in {y}"


def table_rows(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                for t in ("meta", "runs", "users", "attributes", "prompts", "items", "labels", "judge_cache")}


@pytest.fixture
def full_db(recenter_db_copy: Path, shared_data: Path, tmp_path: Path) -> Path:
    """The real Re-Centering release and USR ratings, plus a team's own labels for every stage."""
    result = invoke("import", "usr", str(shared_data / "usr_personachat"), "--db", str(recenter_db_copy))
    assert result.exit_code == 0, result.output
    for stage in STAGES:
        rows = team_rows(stage)
        import_labels(write_rows(tmp_path / f"{stage}.jsonl", rows), stage=stage, dataset=f"team-{stage}",  # type: ignore[arg-type]
                      db=recenter_db_copy, origin="synthetic" if stage == "response" else "real")
    return recenter_db_copy


@pytest.mark.slow
def test_round_trip_gives_identical_reports(full_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = invoke("export", "--db", str(full_db), "--out", str(out))
    assert result.exit_code == 0, result.output
    schema = json.loads((out / "schema.json").read_text())
    assert schema["tables"]["labels"]["rows"] == table_rows(full_db)["labels"] > 10_000
    # One folder per table; the dataset tables are partitioned by dataset (Hive style).
    assert {p.name for p in (out / "labels").iterdir()} >= {"dataset=recenter-stage2", "dataset=team-relevance"}
    with duckdb.connect() as con:  # queryable in place, as Spark or DuckDB would
        n = con.execute(f"SELECT count(*) FROM read_parquet('{out}/labels/**/*.parquet', hive_partitioning=true) "
                        "WHERE dataset = 'team-relevance'").fetchall()[0][0]
    assert n == len(team_rows("relevance"))

    copy = tmp_path / "copy.duckdb"
    result = invoke("import", "parquet", str(out), "--db", str(copy))
    assert result.exit_code == 0, result.output
    assert table_rows(copy) == table_rows(full_db)
    same_contents(full_db, copy)
    assert rounded(reports(copy)) == rounded(reports(full_db))
    with duckdb.connect(str(copy), read_only=True) as con:
        assert dataset_origins(con)["team-response"] == "synthetic"
        assert dataset_origins(con)["recenter-stage2"] == "real"


def test_shards_merge_into_one_store(tmp_path: Path) -> None:
    """Two machines judged different datasets; their exports merge; re-merging changes nothing."""
    shards = []
    for k, stage in enumerate(("relevance", "response")):
        db = tmp_path / f"shard{k}.duckdb"
        import_labels(write_rows(tmp_path / f"{stage}.jsonl", team_rows(stage)), stage=stage,  # type: ignore[arg-type]
                      dataset=f"team-{stage}", db=db)
        assert invoke("export", "--db", str(db), "--out", str(tmp_path / f"out{k}")).exit_code == 0
        shards.append(db)
    merged = tmp_path / "merged.duckdb"
    for k in range(2):
        result = invoke("import", "parquet", str(tmp_path / f"out{k}"), "--db", str(merged))
        assert result.exit_code == 0, result.output
    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        frame = frame.sort_values(["dataset", "item_id", "rater"]).astype(object)
        return frame.where(frame.notna(), None).to_dict("records")

    assert records(load_labels(merged)) == records(pd.concat([load_labels(db) for db in shards]))
    before = table_rows(merged)
    assert invoke("import", "parquet", str(tmp_path / "out0"), "--db", str(merged)).exit_code == 0
    assert table_rows(merged) == before


@pytest.fixture
def export_dir(tmp_path: Path) -> Path:
    db = tmp_path / "src.duckdb"
    import_labels(write_rows(tmp_path / "rel.jsonl", team_rows("relevance", n_users=3)), stage="relevance",
                  dataset="team", db=db)
    out = tmp_path / "export"
    assert invoke("export", "--db", str(db), "--out", str(out)).exit_code == 0
    return out


def _break(out: Path, how: str) -> str:
    schema_path = out / "schema.json"
    schema = json.loads(schema_path.read_text())
    if how == "no-schema":
        schema_path.unlink()
        return "schema.json: missing: not a PersonaGap export"
    if how == "newer":
        schema["schema_version"] = 99
        schema_path.write_text(json.dumps(schema))
        return "schema.json: field 'schema_version': 99 is not supported"
    if how == "columns":
        schema["tables"]["items"]["columns"].pop()
        schema_path.write_text(json.dumps(schema))
        return "schema.json: field 'tables.items.columns': columns"
    if how == "truncated":
        shutil.rmtree(out / "labels")
        return "labels: no Parquet files, but schema.json says"
    if how == "not-json":
        schema_path.write_text("{")
        return "schema.json: cannot read"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["no-schema", "newer", "columns", "truncated", "not-json"])
def test_broken_export_is_one_line_and_writes_nothing(export_dir: Path, tmp_path: Path, how: str) -> None:
    expected = _break(export_dir, how)
    db = tmp_path / "target.duckdb"
    result = invoke("import", "parquet", str(export_dir), "--db", str(db))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.output
    assert not db.exists() or table_rows(db)["labels"] == 0


def test_export_refuses_a_folder_with_files(export_dir: Path, tmp_path: Path) -> None:
    result = invoke("export", "--db", str(tmp_path / "src.duckdb"), "--out", str(export_dir))
    assert result.exit_code == 2 and "exists and is not an empty folder" in result.output
