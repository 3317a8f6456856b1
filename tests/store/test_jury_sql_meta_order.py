"""The jury's stored meta lists its jurors in key order whatever order they are given in (store/jury_counts.py).

The meta's JSON is built from one column per juror (its position in key order), not by an ordered aggregate: the
text must still list exactly the jurors that labelled the item, in "RATER|CONDITION" text order, and a rerun must
replace the jury's labels, even when the jury is named like one of its jurors (the vote reads the labels before).
"""

from __future__ import annotations

from pathlib import Path

from personagap.judges.jury import build_jury
from personagap.records import Label
from personagap.store import opened, write_labels


def test_meta_lists_the_jurors_that_labelled_in_key_order(tmp_path: Path) -> None:
    db = tmp_path / "jury.duckdb"
    # Keys sort by code point, as SQL sorts text: "ba|" before "b|" ("a" < "|"), "b|" before "b|z", "É" last.
    labels = {("ba", ""): ["A", "B", None], ("b", "z"): ["A", "A", "B"], ("É", ""): ["B", None, "B"],
              ("b", ""): ["B", "A", "A"]}
    with opened(db) as con:
        write_labels(con, [Label(item_id=f"i{k}", rater=r, rater_kind="llm", condition=c, label=v, run_id="r")
                           for (r, c), values in labels.items() for k, v in enumerate(values) if v is not None])
    jurors = list(labels)  # not in key order
    result = build_jury(db, jurors, "majority", rater="jury")
    with opened(db, read_only=True) as con:
        got = dict(con.execute("SELECT item_id, CAST(meta AS TEXT) FROM labels WHERE rater = 'jury'").fetchall())
        stored = dict(con.execute("SELECT item_id, label FROM labels WHERE rater = 'jury'").fetchall())
    assert got == {
        "i0": '{"rule":"majority","jurors":{"ba|":"A","b|":"B","b|z":"A","É|":"B"}}',
        "i1": '{"rule":"majority","jurors":{"ba|":"B","b|":"A","b|z":"A"}}',
        "i2": '{"rule":"majority","jurors":{"b|":"A","b|z":"B","É|":"B"}}',
    }
    assert stored == {"i0": None, "i1": "A", "i2": "B"}  # i0: two against two
    assert (result.labelled, result.undecided, result.status) == (2, 1, "finished")
    # Named like a juror: the vote still reads that juror's labels, which the jury then replaces.
    again = build_jury(db, [("b", ""), ("b", "z"), ("É", "")], "majority", rater="b")
    with opened(db, read_only=True) as con:
        b = dict(con.execute("SELECT item_id, label FROM labels WHERE rater = 'b' AND condition = ''").fetchall())
    assert b == {"i0": "B", "i1": "A", "i2": "B"} and (again.labelled, again.undecided) == (3, 0)
