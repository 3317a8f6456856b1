"""The pipeline view's records: its rows, stage comparisons, oracle-input differences and cascade (JSON shapes)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from personagap.analysis.agreement import json_safe


class JudgeRate(BaseModel):
    """One judge's view of a pipeline row: its own rate and the rate corrected by its errors against humans."""

    judge: str
    naive: float | None = Field(description="The judge's rate over every output of the row it labelled.")
    corrected: float | None = Field(description="Rogan–Gladen corrected by the judge's sensitivity and specificity "
                                                "against humans; null without human verdicts.")
    corrected_ci: list[float | None]
    n_items: int = Field(description="Outputs of the row the judge labelled.")


class PipelineRow(BaseModel):
    """The share of one stage's outputs humans judge failed, for one system (and input condition)."""

    stage: int
    dataset: str
    system: str | None = Field(description="Extractor, selector or generator; null where the data does not say.")
    system_kind: str | None = Field(default=None, description="Stage 2: the selector's rater kind (``system`` = a "
                                                              "pipeline's own selection, ``llm`` = an LLM labeller).")
    input_condition: str | None = Field(description="Stage 3: pipeline | oracle | none (null: not recorded). Stage 2: "
                                                    "null = every attribute, oracle = only attributes humans accepted "
                                                    "at stage 1. Stage 1: null.")
    quantity: str
    human: float | None = Field(description="By the blind human reference; null where no human verdict exists.")
    human_ci: list[float | None]
    n_items: int = Field(description="Outputs of the system in this row.")
    n_human: int = Field(description="Of them, with a human verdict (the denominator's items).")
    n_users: int
    judges: list[JudgeRate] = Field(default_factory=list)
    unsure: float | None = Field(default=None, description="Stage 1: share of verdicts 'unsure' (reported apart).")
    unsure_ci: list[float | None] | None = None


class Comparison(BaseModel):
    """The difference of two stages' headline failure shares, paired over the users they share."""

    first: int
    second: int
    difference: float | None
    ci: list[float | None]
    n_users: int
    shared_users: int


class Upstream(BaseModel):
    """A stage with the pipeline's input minus with an oracle input: the part of its failure upstream causes.

    Stage 3: answers written from the pipeline's selection minus from the human-selected attributes. Stage 2: a
    selector over every extracted attribute minus over the attributes humans accepted at stage 1.
    """

    stage: int
    dataset: str
    system: str | None
    quantity: str
    human: float | None
    human_ci: list[float | None]
    n_users: int
    judges: list[dict[str, Any]] = Field(default_factory=list, description="Per judge: its naive difference (pipeline "
                                         "minus oracle input) with its paired CI and users.")


class Cascade(BaseModel):
    """Answers written from attributes humans rejected (stage 1) or judged irrelevant for the prompt (stage 2)."""

    dataset: str
    system: str | None
    input_condition: str | None
    n_linked: int = Field(description="Answers that record the attributes they used.")
    n_flagged: int = Field(description="Over-personalised: at least one used attribute is an upstream error.")
    n_rejected: int
    n_irrelevant: int
    n_failures: int = Field(description="Linked answers humans judge no better than generic.")
    n_failures_traced: int = Field(description="Of those, flagged: traced to an upstream error.")


class PipelineView(BaseModel):
    """Everything ``diagnose`` and the Overview say about which stage of the pipeline fails."""

    rows: list[PipelineRow]
    verdict: str
    worst_stage: int | None
    comparisons: list[Comparison]
    upstream: list[Upstream]
    cascade: list[Cascade]
    flagged: list[dict[str, Any]] = Field(description="Over-personalised answers: item id and upstream errors.")
    missing: list[str] = Field(description="One line per row without a human verdict: what labelling would tell.")
    counted_once: list[str] = Field(default_factory=list, description="One line per set of stored stage-3 pairs "
                                    "whose two answers another stored pair holds: counted once, in that one's row.")

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON shape of ``diagnose --json``: NaN as null."""
        return {"pipeline": json_safe([r.model_dump() for r in self.rows]), "pipeline_verdict": self.verdict,
                "pipeline_worst_stage": self.worst_stage,
                "pipeline_comparisons": json_safe([c.model_dump() for c in self.comparisons]),
                "pipeline_upstream": json_safe([u.model_dump() for u in self.upstream]),
                "pipeline_cascade": {"summary": json_safe([c.model_dump() for c in self.cascade]),
                                     "flagged": self.flagged},
                "pipeline_counted_once": self.counted_once}
