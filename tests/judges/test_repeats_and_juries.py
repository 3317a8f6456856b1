"""Repeated judging, self-agreement and juries (issue 23, item 5), against hand-computed values."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from personagap.analysis.self_agreement import self_agreement
from personagap.judges.base import get_judge
from personagap.judges.jury import build_jury, jury_vote
from personagap.judges.lm import LMConfig
from personagap.judges.repeats import majority_rater, run_repeats
from personagap.store import label_counts, opened
from tests.support import release_builders
from tests.support.openai_server import ConfidenceServer, last_user_message


def test_jury_vote_rules_by_hand() -> None:
    assert jury_vote([("A", None), ("A", None), ("B", None)], "majority") == ("A", None)
    assert jury_vote([("A", None), ("B", None)], "majority")[0] is None  # a tie is undecided, never a guess
    # Confidence-weighted: A 0.9 against B 0.6 + 0.5 = 1.1, so B, although the strongest single vote is A's.
    assert jury_vote([("A", 0.9), ("B", 0.6), ("B", 0.5)], "confidence") == ("B", None)
    assert jury_vote([("A", 0.5), ("B", 0.5)], "confidence")[0] is None
    assert "no confidence" in str(jury_vote([("A", 0.9), ("B", None)], "confidence")[1])
    assert jury_vote([], "majority") == (None, "no juror labelled this item")


def test_self_agreement_by_hand() -> None:
    # i1: A A A (3 of 3 pairs agree), i2: A A B (1 of 3), i3: A B and a failed sample (0 of 1): 4 / 7 pooled.
    rows = [("i1", "u1", "A"), ("i1", "u1", "A"), ("i1", "u1", "A"), ("i2", "u2", "A"), ("i2", "u2", "A"),
            ("i2", "u2", "B"), ("i3", "u3", "A"), ("i3", "u3", "B")]
    frame = pd.DataFrame(rows, columns=["item_id", "user_id", "label"]).assign(sample=[1, 2, 3, 1, 2, 3, 1, 2])
    sa = self_agreement(frame, 3)
    assert sa.agreement.value == pytest.approx(4 / 7)
    assert sa.items == 3 and sa.fleiss_items == 2
    # Fleiss on i1 [3, 0], i2 [2, 1]: P = (1 + 1/3) / 2 = 2/3; p = (5/6, 1/6); Pe = 26/36; kappa = -1/5.
    assert sa.fleiss_kappa == pytest.approx(-0.2)
    assert math.isnan(sa.agreement.ci[0])  # 3 users: too few for an interval
    with pytest.raises(ValueError, match="more than 2 samples"):
        self_agreement(frame, 2)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    from personagap.stages.response import import_prism

    folder = tmp_path / "prism_judge"
    folder.mkdir()
    for name, rows in release_builders.prism().items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    target = tmp_path / "jury.duckdb"
    import_prism(folder, target)
    return target


def test_repeats_store_samples_their_majority_and_self_agreement_over_http(db: Path) -> None:
    from personagap.judges.response import pairwise_tasks
    from personagap.stages.response import load_items

    said = {0: ["A", "A", "A"], 1: ["A", "B", "B"], 2: ["A", "B", "tie"]}
    asked: dict[int, int] = {}
    lock = threading.Lock()

    def answer(body: dict[str, Any]) -> str:
        q = next(k for k in range(3) if f"Question {k}?" in last_user_message(body))
        with lock:
            n = asked[q] = asked.get(q, 0) + 1
        return json.dumps({"reason": "r", "verdict": said[q][n - 1]})

    with opened(db, read_only=True) as con:
        items = load_items(con)
    judge = get_judge("pairwise")
    tasks = pairwise_tasks(items[items["kind"] == "pairwise"], profile=True)
    with ConfidenceServer(answer, lambda t: 0.0) as server:
        lm = LMConfig(model="openai/scripted", api_base=server.base_url, temperature=0.7)
        result = run_repeats(db, judge, tasks, lm, repeats=3, concurrency=1, progress=False, max_retries=0)
    assert asked == {0: 3, 1: 3, 2: 3}  # each sample asked once per item: its own cache key
    assert [s.rater for s in result.samples] == [f"pairwise+sample-{k}/v1/openai/scripted" for k in (1, 2, 3)]
    (sa,) = result.self_agreement.values()
    assert sa.agreement.value == pytest.approx((3 + 1 + 0) / 9)
    (majority,) = result.majority
    assert (majority.labelled, majority.undecided) == (2, 1)  # question 2's samples tie
    with opened(db, read_only=True) as con:
        stored = con.execute("SELECT i.payload->>'question', l.label, l.meta FROM labels l JOIN items i "
                             "USING (item_id) WHERE l.rater = ?", [majority_rater(judge, lm.model, 3)]).fetchall()
        judges, _ = label_counts(con, "response")
    by_question = {q: (label, json.loads(meta)) for q, label, meta in stored}
    for label, meta in by_question.values():
        votes = list(meta["jurors"].values())
        expected = max(set(votes), key=votes.count) if max(map(votes.count, votes)) > 1 else None
        assert label == expected
    assert by_question["Question 2?"][0] is None
    # Scored like any judge: the store's judge counts hold the majority rater's two parsed labels.
    assert judges.loc[judges["rater"] == majority_rater(judge, lm.model, 3), "n"].sum() == 2


def test_a_jury_of_different_judges_is_stored_as_a_judge_and_refuses_bad_jurors(db: Path) -> None:
    from personagap.records import Label
    from personagap.store import write_labels

    with opened(db) as con:
        items = [r[0] for r in con.execute("SELECT item_id FROM items ORDER BY item_id").fetchall()]
        votes = {"j1": ["A", "B", "A"], "j2": ["A", "A", "B"], "j3": ["B", "A", "B"]}
        probs = {"j1": [90, 90, 60], "j2": [60, 10, 60], "j3": [60, 20, 60]}
        write_labels(con, [Label(item_id=i, rater=j, rater_kind="llm", label=v[k], run_id="r",
                                 meta={"confidence": probs[j][k], "confidence_scale": "0-100"})
                           for j, v in votes.items() for k, i in enumerate(items)])
    jurors = [("j1", ""), ("j2", ""), ("j3", "")]
    build_jury(db, jurors, "majority", rater="jury-majority")
    build_jury(db, jurors, "confidence", rater="jury-confidence")
    with opened(db, read_only=True) as con:
        got = dict(con.execute("SELECT rater || item_id, label FROM labels WHERE rater LIKE 'jury-%'").fetchall())
    # By hand: majority A, A, B; confidence item 1: A 0.9 + 0.6 vs B 0.6 -> A; item 2: B 0.9 vs A 0.1 + 0.2 -> B
    # (one sure juror outweighs two unsure ones); item 3: A 0.6 vs B 0.6 + 0.6 -> B.
    assert [got["jury-majority" + i] for i in items] == ["A", "A", "B"]
    assert [got["jury-confidence" + i] for i in items] == ["A", "B", "B"]
    with pytest.raises(ValueError, match="at least two"):
        build_jury(db, [("j1", "")], "majority", rater="x")
    with pytest.raises(ValueError, match="no parsed label of juror"):
        build_jury(db, [("j1", ""), ("nobody", "")], "majority", rater="x")
