"""The judges' confidence tally (personagap/store/confidence.py) on a store small enough to count by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from personagap.store import opened
from personagap.store.confidence import COUNTS_MEMORY_LIMIT, confidence_counts, confidence_counts_by_judge

# item -> (user, blind human label or None: no reference). Users are named so that code-point order (U < u, "u10"
# before "u9") differs from insertion order and from natural order.
ITEMS = {"i1": ("u9", "yes"), "i2": ("u9", "yes"), "i3": ("u10", "no"), "i4": ("U1", None), "i5": ("U1", "no")}
C01 = {"confidence_scale": "0-1"}
# (item, judge, label, meta), inserted out of order on purpose.
JUDGED: list[tuple[str, str, str | None, dict[str, object] | None]] = [
    ("i5", "judge-a", "yes", {"confidence": 0.9, **C01}),
    ("i3", "judge-a", "no", {"confidence": 0.6, **C01}),
    ("i2", "judge-a", "no", {"confidence": 0.9, **C01}),
    ("i1", "judge-a", "yes", {"confidence": 0.9, **C01}),
    ("i4", "judge-a", "yes", {"confidence": 0.7, **C01}),  # no reference: counted among labels, not in the rows
    ("i1", "judge-b", "yes", None),  # no confidence at all
    ("i2", "judge-b", "yes", {"confidence_error": "not a number", **C01}),  # a failure; the label stands
    ("i3", "judge-b", "yes", {"confidence": 0.8, **C01}),
    ("i5", "judge-b", "no", {"confidence": "high", **C01}),  # stored text that is no number: not usable
    ("i4", "judge-b", None, {"confidence": 0.5, **C01}),  # an unparsed label: counted nowhere
    ("i1", "judge-c", "yes", {"confidence": 3, "confidence_scale": "1-5"}),
    ("i3", "judge-c", "yes", {"confidence": 0.5, **C01}),
    ("i2", "judge-d", "yes", None),  # a judge without any usable confidence: no entry
    ("i1", "in-sample", "yes", {"confidence": 0.5, **C01}),  # not comparable: left out
]


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    path = tmp_path / "conf.duckdb"
    with opened(path) as con:
        for item, (user, _) in ITEMS.items():
            con.execute("INSERT INTO items (item_id, dataset, stage, user_id) VALUES (?, 'd', 'relevance', ?)",
                        [item, user])
        rows = [(item, "ann-1", "human", "", human, None) for item, (_, human) in ITEMS.items() if human]
        rows += [(item, judge, "llm", "in-sample" if judge == "in-sample" else "", label,
                  None if meta is None else json.dumps(meta)) for item, judge, label, meta in JUDGED]
        for item, rater, kind, condition, label, meta in rows:
            con.execute("INSERT INTO labels (item_id, rater, rater_kind, condition, label, error, run_id, meta) "
                        "VALUES (?, ?, ?, ?, ?, ?, 'r1', ?)",
                        [item, rater, kind, condition, label, None if label else "unparsed", meta])
    return path


def _rows(*rows: tuple[str, float, str, str, int]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["user_id", "confidence", "human", "label", "n"])


def test_each_judge_gets_its_sorted_count_rows_and_its_labels_without_a_confidence(db: Path) -> None:
    with opened(db, read_only=True) as con:
        judges = confidence_counts_by_judge(con, "relevance")
        # The temporary table is gone and the memory limit back to DuckDB's default.
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = '_pg_confidence_counts'"
                           ).fetchall() == [(0,)]
        assert con.execute("SELECT current_setting('memory_limit')").fetchall() != [(COUNTS_MEMORY_LIMIT,)]
    assert [j.rater for j in judges] == ["judge-a", "judge-b", "judge-c"]  # judge-d has no usable confidence
    a, b, c = judges
    assert a.key == ("d", "judge-a", "llm", "")
    assert (a.labels, a.with_confidence, a.confidence_failures, a.scales) == (5, 5, 0, ("0-1",))
    # Code-point order of users (U1 < u10 < u9), then confidence, reference, label.
    pd.testing.assert_frame_equal(a.rows, _rows(("U1", 0.9, "no", "yes", 1), ("u10", 0.6, "no", "no", 1),
                                                 ("u9", 0.9, "yes", "no", 1), ("u9", 0.9, "yes", "yes", 1)),
                                  check_dtype=False)
    assert (b.labels, b.with_confidence, b.confidence_failures, b.scales) == (4, 1, 1, ("0-1",))
    pd.testing.assert_frame_equal(b.rows, _rows(("u10", 0.8, "no", "yes", 1)), check_dtype=False)
    assert (c.labels, c.with_confidence, c.scales) == (2, 2, ("0-1", "1-5"))


def test_the_whole_count_frame_is_the_judges_rows_in_one(db: Path) -> None:
    with opened(db, read_only=True) as con:
        whole = confidence_counts(con, "relevance")
        judges = confidence_counts_by_judge(con, "relevance")
    assert whole.columns.tolist() == ["dataset", "rater", "rater_kind", "condition", "confidence_scale", "user_id",
                                      "confidence", "human", "label", "n"]
    assert whole.equals(whole.sort_values(whole.columns.tolist(), ignore_index=True))
    for judge in judges:
        mine = whole[whole["rater"] == judge.rater]
        assert sorted(set(mine["confidence_scale"])) == list(judge.scales)
        pd.testing.assert_frame_equal(mine[judge.rows.columns].reset_index(drop=True), judge.rows)
    assert int(whole["n"].sum()) == 4 + 1 + 2
    assert set(whole["rater"]) == {"judge-a", "judge-b", "judge-c"}


def test_another_stage_or_dataset_counts_nothing(db: Path) -> None:
    with opened(db, read_only=True) as con:
        assert confidence_counts_by_judge(con, "response") == []
        assert confidence_counts_by_judge(con, "relevance", "other") == []
        assert [j.rater for j in confidence_counts_by_judge(con, "relevance", "d")] == ["judge-a", "judge-b",
                                                                                        "judge-c"]


def test_blind_pairs_need_two_blind_human_votes_on_one_item_of_the_stage(db: Path) -> None:
    from personagap.store.confidence import has_blind_pairs

    with opened(db) as con:
        assert not has_blind_pairs(con, "relevance")  # one person per item
        # A second person's unparsed label and a judge's label are no votes.
        con.execute("INSERT INTO labels (item_id, rater, rater_kind, condition, label, error, run_id) VALUES "
                    "('i1', 'ann-2', 'human', '', NULL, 'unparsed', 'r1'), ('i1', 'j', 'llm', '', 'no', NULL, 'r1')")
        assert not has_blind_pairs(con, "relevance")
        con.execute("INSERT INTO labels (item_id, rater, rater_kind, condition, label, run_id) VALUES "
                    "('i3', 'ann-2', 'human', '', 'yes', 'r1')")
        assert has_blind_pairs(con, "relevance")
        assert not has_blind_pairs(con, "response")
