"""The dashboard headlines weighted kappa (with its CI) for judges of ordinal datasets, Cohen's kappa otherwise."""

from __future__ import annotations

from typing import Any

from personagap.analysis.diagnosis import JudgeScore, StageDiagnosis
from personagap.dashboard.render import forest_frames, forest_title, judges_table


def _score(judge: str, scale: str, **extra: Any) -> JudgeScore:
    return JudgeScore(stage="response", dataset=f"d-{scale}", judge=judge, rater=judge, rater_kind="llm",
                      condition="", n=40, n_users=8, failures=0, categories=["1", "2", "3"],
                      confusion=[[1, 0, 0], [0, 1, 0], [0, 0, 1]], kappa=0.21, kappa_ci=[0.05, 0.37], accuracy=0.5,
                      accuracy_ci=[0.4, 0.6], binary=False, scale=scale, **extra)


def test_ordinal_rows_show_weighted_kappa_and_nominal_rows_kappa() -> None:
    ordinal = _score("rater-o", "ordinal", weighted_kappa=0.64, weighted_kappa_ci=[0.51, 0.77])
    nominal = _score("rater-n", "nominal")
    table = judges_table([ordinal, nominal]).set_index("judge")["kappa (95% CI)"]
    assert table["rater-o"] == "weighted kappa 0.64 [0.51, 0.77]"
    assert table["rater-n"] == "0.21 [0.05, 0.37]"
    stage = StageDiagnosis.model_construct(stage="response", judges=[ordinal, nominal], ceilings=[], ceiling=None)
    judges, _ = forest_frames([stage])
    rows = judges.set_index("judge")
    assert (rows.loc["rater-o", "figure"], rows.loc["rater-o", "kappa"], rows.loc["rater-o", "ci_low"]) == \
        ("weighted kappa", 0.64, 0.51)
    assert (rows.loc["rater-n", "figure"], rows.loc["rater-n", "kappa"]) == ("kappa", 0.21)
    assert "weighted" in forest_title(judges) and "weighted" not in forest_title(judges[judges["figure"] == "kappa"])
