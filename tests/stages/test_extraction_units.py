"""Stage 1 pure functions: parsers, chunking, merging, the offline matcher and metrics on hand-worked values."""

from __future__ import annotations

import json
import math

import krippendorff
import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

from personagap.analysis.comparable import majority_label
from personagap.analysis.extraction import (
    ExtractedAttribute,
    attributes_from_label,
    attributes_label,
    calibrate_threshold,
    containment,
    extracted_items,
    judge_vs_reference,
    match_unit,
    merge_attributes,
    prf,
    rater_agreement,
    ratio,
    verdict_rates,
)
from personagap.judges.base import JudgeTask, Verdict
from personagap.judges.extraction import (
    Extract,
    Match,
    Turn,
    Unit,
    Verify,
    chunk_turns,
    extraction_tasks,
    format_turns,
    parse_attributes,
)


def _task(turn_ids=("s0t1", "s0t3")) -> JudgeTask:
    return JudgeTask(key="c1", targets=("c1",), inputs={"conversation": ""}, meta={"turn_ids": list(turn_ids)})


# ----------------------------------------------------------------- parsers on plain strings

def test_parse_attributes_reads_a_valid_answer_from_text():
    text = '[{"attribute": "The user likes comedy.", "turn_ids": ["s0t1"], "confidence": 0.8}]'
    assert parse_attributes(text, ["s0t1"]) == [ExtractedAttribute("The user likes comedy.", ("s0t1",), 0.8)]
    assert parse_attributes("[]", ["s0t1"]) == []


@pytest.mark.parametrize("text, prefix", [
    ("not json at all", "unparseable:"),
    ('{"attribute": "x"}', "unparseable:"),
    ('[{"turn_ids": ["s0t1"]}]', "unparseable:"),
    ('[{"attribute": "x", "turn_ids": ["s0t1"], "confidence": "high"}]', "unparseable:"),
    ('[{"attribute": "x", "turn_ids": ["s9t9"]}]', "invalid:"),
    ('[{"attribute": "x", "turn_ids": []}]', "invalid:"),
    ('[{"attribute": "x", "turn_ids": ["s0t1"], "confidence": 1.4}]', "invalid:"),
    ('[{"attribute": "  ", "turn_ids": ["s0t1"]}]', "invalid:"),
])
def test_parse_attributes_failures_are_errors_never_attributes(text, prefix):
    out = parse_attributes(text, ["s0t1"])
    assert isinstance(out, str) and out.startswith(prefix)


def test_extract_judge_label_is_canonical_json_and_unknown_turn_fails_the_chunk():
    judge = Extract()
    ok = judge.parse({"attributes": [{"attribute": "B", "turn_ids": ["s0t3", "s0t1"], "confidence": 1}]}, _task())
    assert ok["c1"].label == json.dumps([{"attribute": "B", "confidence": 1.0, "turn_ids": ["s0t3", "s0t1"]}])
    bad = judge.parse({"attributes": [{"attribute": "A", "turn_ids": ["s0t1"]},
                                      {"attribute": "B", "turn_ids": ["s0t2"]}]}, _task())
    assert bad["c1"].label is None and bad["c1"].error.startswith("invalid:") and "s0t2" in bad["c1"].error


def test_verify_and_match_parse_choices_and_fail_on_anything_else():
    t = JudgeTask(key="a", targets=("a",), inputs={})
    assert Verify().parse({"answer": "OK.", "reason": "r"}, t)["a"] == Verdict("ok", "r")
    assert Verify().parse({"answer": "bad"}, t)["a"].label == "bad"
    assert Verify().parse({"answer": "Unsure"}, t)["a"].label == "unsure"
    failed = Verify().parse({"answer": "probably fine"}, t)["a"]
    assert failed.label is None and failed.error.startswith("unparseable:")
    assert Match().parse({"answer": "SAME"}, t)["a"].label == "same"
    assert Match().parse({"answer": "different"}, t)["a"].label == "different"
    assert Match().parse({"answer": "[", "reason": None}, t)["a"].label is None


def test_label_round_trip():
    attrs = [ExtractedAttribute("x", ("1", "2"), None), ExtractedAttribute("y", ("3",), 0.5)]
    assert attributes_from_label(attributes_label(attrs)) == attrs


# ----------------------------------------------------------------- chunking and merging

def test_chunk_turns_respects_the_budget_and_keeps_every_turn_once():
    turns = [Turn(f"t{i}", "User", "x" * 30) for i in range(10)]
    one = len(format_turns(turns[:1]))  # "[t0] User: " + 30 chars = 41
    chunks = chunk_turns(turns, max_chars=2 * one + 1)  # two turns + the newline fit, three do not
    assert [len(c) for c in chunks] == [2, 2, 2, 2, 2]
    assert [t for c in chunks for t in c] == turns
    assert all(len(format_turns(c)) <= 2 * one + 1 for c in chunks)
    long = [Turn("a", "User", "y" * 500), Turn("b", "User", "z")]
    assert [len(c) for c in chunk_turns(long, max_chars=100)] == [1, 1]  # an over-long turn stands alone


def test_extraction_tasks_one_per_chunk_with_turn_ids_in_meta():
    unit = Unit("d", "movie/w1", "w1", tuple(Turn(f"s0t{i}", "User", "hello there") for i in range(4)))
    tasks, items = extraction_tasks([unit], max_chars=60)
    assert len(tasks) == len(items) >= 2
    assert [t.key for t in tasks] == [i.item_id for i in items]
    assert sum(len(t.meta["turn_ids"]) for t in tasks) == 4
    assert tasks[0].inputs["conversation"].startswith("[s0t0] User: hello there")


def test_merge_attributes_unites_turns_and_keeps_max_confidence():
    cat = ExtractedAttribute("Owns a cat", ("3",), None)
    merged = merge_attributes([[ExtractedAttribute("Likes jazz.", ("1",), 0.4)],
                               [ExtractedAttribute("likes  JAZZ", ("2", "1"), 0.9), cat]])
    assert merged == [ExtractedAttribute("Likes jazz.", ("1", "2"), 0.9), cat]


def test_extracted_items_skip_a_history_with_a_failed_chunk():
    chunks = [{"item_id": f"c{i}", "dataset": "d", "user_id": u,
               "payload": {"unit": u, "chunk": i % 2, "max_chars": 100}}
              for i, u in enumerate(["u1", "u1", "u2", "u2"])]
    good = attributes_label([ExtractedAttribute("A", ("1",), 0.5)])
    labels = [{"item_id": "c0", "rater": "r", "label": good}, {"item_id": "c1", "rater": "r", "label": good},
              {"item_id": "c2", "rater": "r", "label": good}, {"item_id": "c3", "rater": "r", "label": None}]
    items = extracted_items(chunks, labels)
    assert [(i.user_id, i.attribute) for i in items] == [("u1", "A")]  # u1's two chunks merged into one attribute
    assert items[0].payload["extractor"] == "r"


# ----------------------------------------------------------------- offline matcher

def test_containment_hand_values():
    assert containment("The user enjoys comedies with the kids", "Comedy") == 1.0
    assert containment("The user avoids adult content", "No adult themes") == 0.5  # {adult, theme}: adult only
    assert containment("anything", "the") == 0.0  # a gold value with no content word never matches


def test_calibrate_threshold_hand_worked():
    # t=0.5: TPR 3/3, FPR 1/3 (J 2/3); t=1.0: TPR 2/3, FPR 0 (J 2/3): a tie goes to the stricter threshold.
    cal = calibrate_threshold([1.0, 0.5, 1.0], [0.0, 0.5, 0.0])
    assert cal.threshold == 1.0 and cal.tpr == pytest.approx(2 / 3) and cal.fpr == 0.0
    cal = calibrate_threshold([1.0, 0.6, 0.6], [0.0, 0.5, 0.0])
    assert cal.threshold == 0.6 and cal.youden_j == 1.0


def test_match_unit_assigns_nearest_gold_and_flags():
    attrs = ["The user loves comedy films", "The user owns a dog", "Watches with kids"]
    golds = ["comedy", "kids", "horror"]
    a_match, nearest, g_match = match_unit(attrs, golds, threshold=0.5)
    assert a_match.tolist() == [True, False, True]
    assert nearest.tolist()[0] == 0 and nearest.tolist()[2] == 1
    assert g_match.tolist() == [True, True, False]
    llm = np.array([[False, False, True], [False, False, False], [False, False, False]])
    a_match, nearest, g_match = match_unit(attrs, golds, llm=llm)
    assert a_match.tolist() == [True, False, False] and nearest[0] == 2 and g_match.tolist() == [False, False, True]


# ----------------------------------------------------------------- metrics

def test_prf_hand_worked_and_ci_contains_point():
    # user a: 1 of 2 attributes matched, 1 of 1 gold found; user b: 1 of 1, 1 of 3.
    out = prf([1, 1], [2, 1], [1, 1], [1, 3], ["a", "b"])
    assert out.precision.value == pytest.approx(2 / 3)
    assert out.recall.value == pytest.approx(2 / 4)
    assert out.f1.value == pytest.approx(4 / 7)
    assert (out.n_attributes, out.n_gold, out.n_users) == (3, 4, 2)
    # Two users are below the documented minimum for a CI: no interval, rather than a misleading one.
    assert all(math.isnan(b) for b in out.precision.ci)
    # The same two users' counts, six times over (twelve users): now the CI exists and holds the point.
    many = prf([1, 1] * 6, [2, 1] * 6, [1, 1] * 6, [1, 3] * 6, [f"u{i}" for i in range(12)])
    assert many.precision.value == pytest.approx(2 / 3) and many.n_users == 12
    assert many.precision.ci[0] <= 2 / 3 <= many.precision.ci[1] and many.precision.ci[0] < many.precision.ci[1]


def test_prf_no_attributes_is_nan_not_zero():
    out = prf([0], [0], [0], [2], ["a"])
    assert math.isnan(out.precision.value) and out.recall.value == 0.0


def test_ratio_and_verdict_rates():
    assert ratio([1, 0, 1], [1, 1, 1], ["a", "a", "b"]).value == pytest.approx(2 / 3)
    rates = verdict_rates(["ok", "ok", "bad", "unsure"], ["a", "a", "b", "b"])
    assert (rates["ok"].value, rates["bad"].value, rates["unsure"].value) == (0.5, 0.25, 0.25)


def test_majority_ties_are_none():
    assert majority_label(["ok", "bad", "ok"]) == "ok"
    assert majority_label(["ok", "bad"]) is None
    assert majority_label([]) is None


def test_judge_vs_reference_kappa_hand_worked():
    # 2x2: po = 3/4; reference ok/bad 1/2 each, judge ok 3/4 -> pe = 1/2*3/4 + 1/2*1/4 = 1/2 -> kappa 1/2.
    ref = {"1": "ok", "2": "bad", "3": "ok", "4": "bad", "5": "ok"}
    judge = {"1": "ok", "2": "ok", "3": "ok", "4": "bad"}  # item 5 unjudged: left out
    est = judge_vs_reference(judge, ref, {k: "u" + k for k in ref})
    assert est["kappa"].value == pytest.approx(0.5)
    assert est["accuracy"].value == pytest.approx(0.75)


def test_rater_agreement_matches_krippendorff_and_statsmodels():
    rng = np.random.default_rng(1)
    cats = ["ok", "bad", "unsure"]
    rows = []
    for item in range(30):
        truth = cats[item % 3]
        for rater in ("a", "b", "c"):
            label = truth if rng.random() < 0.7 else cats[rng.integers(3)]
            rows.append({"item_id": f"i{item}", "rater": rater, "label": label, "cluster": f"u{item // 2}"})
    rows.append({"item_id": "i99", "rater": "a", "label": "ok", "cluster": "u9"})  # rated once: ignored
    frame = pd.DataFrame(rows)
    out = rater_agreement(frame)
    wide = frame[frame["item_id"] != "i99"].pivot(index="item_id", columns="rater", values="label")
    coded = wide.apply(lambda c: c.map({"ok": 0, "bad": 1, "unsure": 2})).to_numpy(dtype=float)
    expected = krippendorff.alpha(reliability_data=coded.T, level_of_measurement="nominal")
    assert out.alpha.value == pytest.approx(expected)
    counts = np.column_stack([(coded == k).sum(axis=1) for k in range(3)])
    assert out.fleiss.value == pytest.approx(sm_fleiss(counts))
    assert (out.n_items, out.fleiss_items, out.fleiss_raters_per_item, out.n_users) == (30, 30, 3, 15)
    assert out.pairwise is not None and out.pairwise.groups["human–human"].n_pairs == 3
    assert out.alpha.ci[0] <= out.alpha.value <= out.alpha.ci[1]


def test_rater_agreement_rejects_unknown_categories():
    with pytest.raises(ValueError, match="outside the categories"):
        rater_agreement(pd.DataFrame([{"item_id": "1", "rater": "a", "label": "maybe", "cluster": "u"}]))
