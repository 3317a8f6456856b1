"""The pipeline view on a hand-computed store: exact rows, judges' naive and corrected rates, cascade flags."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import norm

from personagap.analysis.pipeline import labels_needed, pipeline_db
from personagap.analysis.pipeline_records import PipelineView
from tests.support.pipe_store import item, label, write_store

# Stage 1: human reference per extracted attribute (None: no verdict), and verifier v1's verdicts.
S1 = {"a1": ("u1", "bad", "bad"), "a2": ("u1", "ok", "bad"), "a3": ("u1", "unsure", "ok"),
      "a4": ("u2", "bad", "ok"), "a5": ("u2", "ok", "ok"), "a6": ("u2", None, "bad")}
# Stage 2 (one prompt per user): human relevance, the pipeline's own selection, LLM g's labels.
S2 = {"b1": ("u1", "yes", "yes", "yes"), "b2": ("u1", "no", "yes", "no"), "b3": ("u1", "no", "yes", "no"),
      "b4": ("u1", "yes", "no", "yes"), "b5": ("u2", "no", "yes", "yes"), "b6": ("u2", "yes", "no", "no")}
# Stage 3: (user, input condition, attributes used, human verdict, judge pj's verdict); B = personalised.
S3 = {"c1": ("u1", "pipeline", ["b1", "b2"], "A", "B"), "c2": ("u2", "pipeline", ["a4"], "tie", "A"),
      "c3": ("u1", "oracle", ["b1"], "B", "B"), "c4": ("u2", "oracle", ["b6"], None, "B"),
      "c5": ("u1", "none", [], None, None)}


def _store(path: Path) -> Path:
    items, labels = [], []
    for a, (u, human, v1) in S1.items():
        items.append(item(a, "s1", "extraction", u, system="ext-A", attribute_id=a))
        labels += [label(a, "hm", "human_majority", human)] if human else []
        labels.append(label(a, "v1", "llm", v1))
    for b, (u, human, pipe, g) in S2.items():
        items.append(item(b, "s2", "relevance", u, prompt_index=0, attribute=b, attribute_id=b))
        labels += [label(b, "hm", "human_majority", human), label(b, "pipe", "system", pipe), label(b, "g", "llm", g)]
    # Another study's humans call b1 irrelevant for the same prompt: a conflict, so b1 is never an upstream error.
    items.append(item("b1-pilot", "s2-pilot", "relevance", "u1", prompt_index=0, attribute="b1", attribute_id="b1"))
    labels.append(label("b1-pilot", "hm", "human_majority", "no"))
    for c, (u, cond, used, human, pj) in S3.items():
        items.append(item(c, "s3", "response", u, prompt_index=0, kind="generic_vs_personalized", system="gen",
                          input_condition=cond, attributes_used=used, prompt_id=f"{u}_0"))
        labels += [label(c, "hm", "human_majority", human)] if human else []
        labels += [label(c, "pj", "llm", pj)] if pj else []
    return write_store(path / "p.duckdb", items, labels)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> PipelineView:
    return pipeline_db(_store(tmp_path_factory.mktemp("pipe")))


def _row(view: PipelineView, **keys: Any) -> Any:
    found = [r for r in view.rows if all(getattr(r, k) == v for k, v in keys.items())]
    assert len(found) == 1, keys
    return found[0]


def _rg(naive: float, se: float, sp: float) -> float:
    return min(1.0, max(0.0, (naive + sp - 1) / (se + sp - 1)))


def test_stage1_rejected_and_unsure(view: PipelineView) -> None:
    r = _row(view, stage=1, quantity="rejected_attributes")
    refs = [h for _, h, _ in S1.values() if h]
    assert (r.dataset, r.system, r.n_items, r.n_human, r.n_users) == ("s1", "ext-A", len(S1), len(refs), 2)
    assert r.human == pytest.approx(refs.count("bad") / len(refs))
    assert r.unsure == pytest.approx(refs.count("unsure") / len(refs))
    (j,) = r.judges
    verdicts = [v for _, _, v in S1.values()]
    bad_h = [v for _, h, v in S1.values() if h == "bad"]
    not_bad_h = [v for _, h, v in S1.values() if h and h != "bad"]
    naive = verdicts.count("bad") / len(verdicts)
    se, sp = bad_h.count("bad") / len(bad_h), sum(v != "bad" for v in not_bad_h) / len(not_bad_h)
    assert (j.judge, j.n_items) == ("v1", len(S1))
    assert j.naive == pytest.approx(naive)
    assert j.corrected == pytest.approx(_rg(naive, se, sp))


def test_stage2_every_selector(view: PipelineView) -> None:
    for system, col in (("pipe", 2), ("g", 3)):
        sel = [(v[1], v[col]) for v in S2.values()]
        tp = sum(h == "yes" and s == "yes" for h, s in sel)
        fp = sum(h == "no" and s == "yes" for h, s in sel)
        fn = sum(h == "yes" and s == "no" for h, s in sel)
        assert _row(view, system=system, quantity="irrelevant_selected").human == pytest.approx(fp / (tp + fp))
        assert _row(view, system=system, quantity="missed_relevant").human == pytest.approx(fn / (tp + fn))
        assert _row(view, system=system, quantity="over_selection").human == pytest.approx((tp + fp) / (tp + fn))
    # g judges the pipeline's selection: of the attributes the pipeline selected, the share g calls irrelevant.
    (j,) = _row(view, system="pipe", quantity="irrelevant_selected").judges
    picked = [v for v in S2.values() if v[2] == "yes"]
    assert j.judge == "g"
    assert j.naive == pytest.approx(sum(v[3] == "no" for v in picked) / len(picked))
    # A selector is never its own judge, and a system rater is never a judge.
    assert _row(view, system="g", quantity="irrelevant_selected").judges == []


def test_stage3_by_condition(view: PipelineView) -> None:
    for cond in ("pipeline", "oracle"):
        verdicts = [v[3] for v in S3.values() if v[1] == cond and v[3]]
        nb = _row(view, stage=3, input_condition=cond, quantity="no_better_than_generic")
        assert nb.human == pytest.approx(sum(h != "B" for h in verdicts) / len(verdicts))
        worse = _row(view, stage=3, input_condition=cond, quantity="worse_than_generic")
        assert worse.human == pytest.approx(verdicts.count("A") / len(verdicts))
        assert nb.n_items == sum(v[1] == cond for v in S3.values())
    pj = _row(view, input_condition="pipeline", quantity="no_better_than_generic").judges[0]
    assert pj.naive == pytest.approx(0.5)
    none = _row(view, input_condition="none", quantity="no_better_than_generic")
    assert none.human is None and none.human_ci == [None, None] and none.judges == []
    # The missing verdict is one line, sized by the normal interval of a share at its widest.
    z = norm.ppf(0.975)
    assert labels_needed() == math.ceil(z * z * 0.25 / 0.01)
    assert view.missing == ["s3 · gen · none: no human verdict on these 1 answers: label 1 pairs on the Annotate "
                            "page for a ±0.1 estimate"]


def test_upstream_difference(view: PipelineView) -> None:
    up = next(u for u in view.upstream if u.quantity == "no_better_than_generic")
    pipe = [v[3] for v in S3.values() if v[1] == "pipeline" and v[3]]
    oracle = [v[3] for v in S3.values() if v[1] == "oracle" and v[3]]
    assert up.human == pytest.approx(sum(h != "B" for h in pipe) / len(pipe) - sum(h != "B" for h in oracle)
                                     / len(oracle))
    # The judge's own difference, over every answer it labelled (with or without a human verdict).
    said = {cond: [v[4] for v in S3.values() if v[1] == cond and v[4]] for cond in ("pipeline", "oracle")}
    (pj,) = up.judges
    assert pj["judge"] == "pj" and pj["naive_difference"] == pytest.approx(
        sum(v != "B" for v in said["pipeline"]) / len(said["pipeline"])
        - sum(v != "B" for v in said["oracle"]) / len(said["oracle"]))


def test_cascade_flags_exactly_upstream_errors(view: PipelineView) -> None:
    # c1 used b2 (humans: irrelevant for that prompt); c2 used a4 (humans rejected it at stage 1); b1's studies
    # disagree, so c1 and c3 are not flagged for it.
    assert {f["item_id"]: (f["rejected"], f["irrelevant"]) for f in view.flagged} == {
        "c1": ([], ["b2"]), "c2": (["a4"], [])}
    pipe = next(c for c in view.cascade if c.input_condition == "pipeline")
    assert (pipe.n_linked, pipe.n_flagged, pipe.n_failures, pipe.n_failures_traced) == (2, 2, 2, 2)


def test_too_few_users_cannot_tell(view: PipelineView) -> None:
    assert view.worst_stage is None
    assert view.verdict.startswith("Cannot tell") and "too few users" in view.verdict
    assert all(r.human_ci == [None, None] for r in view.rows)  # 2 users: below the CI rule's minimum
