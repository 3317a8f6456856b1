"""The one headline figure per scale (analysis/headline.py), and the diagnosis's rows reading it."""

from __future__ import annotations

from personagap.analysis.diagnosis_ceiling import pair_metric
from personagap.analysis.diagnosis_records import JudgeScore
from personagap.analysis.headline import headline_metric, headline_name
from personagap.records import DatasetScale


def _judge(scale: str, weighted: float | None) -> JudgeScore:
    return JudgeScore(stage="response", dataset="d", judge="j", rater="j", rater_kind="llm", condition="", n=30,
                      n_users=10, failures=0, categories=["1", "2", "3"], confusion=[[1, 0, 0], [0, 1, 0], [0, 0, 1]],
                      kappa=0.10, kappa_ci=[0.0, 0.2], accuracy=0.5, accuracy_ci=[0.4, 0.6], binary=False,
                      scale=scale, weighted_kappa=weighted, weighted_kappa_ci=None if weighted is None else [0.2, 0.4])


def test_weighted_kappa_on_ordinal_kappa_on_nominal_and_pairwise() -> None:
    ordinal = DatasetScale(kind="ordinal", categories=("1", "2", "3"))
    nominal = DatasetScale(kind="nominal", categories=("no", "yes"))
    pairwise = DatasetScale(kind="pairwise", categories=("A", "B", "tie"))
    assert [headline_metric(s) for s in (ordinal, nominal, pairwise, None)] == \
        ["weighted_kappa", "kappa", "kappa", "kappa"]
    assert [headline_metric(k) for k in ("ordinal", "nominal", "pairwise")] == ["weighted_kappa", "kappa", "kappa"]
    assert [pair_metric(s) for s in (ordinal, nominal, pairwise, None)] == \
        ["weighted_kappa", "kappa", "kappa", "kappa"]  # the ceiling and the gap: the same figure
    assert headline_name("weighted_kappa") == "quadratic-weighted kappa" and headline_name("kappa") == "kappa"


def test_a_judge_row_leads_with_its_scales_headline() -> None:
    ordinal = _judge("ordinal", 0.30)
    assert (ordinal.metric, ordinal.headline, ordinal.headline_ci) == ("weighted_kappa", 0.30, [0.2, 0.4])
    nominal = _judge("nominal", None)
    assert (nominal.metric, nominal.headline, nominal.headline_ci) == ("kappa", 0.10, [0.0, 0.2])
