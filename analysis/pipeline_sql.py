"""The pipeline view's reads, re-exported: the queries live in :mod:`personagap.store.pipeline_counts`.

SQL is the store's (issue 31): the per-(dataset, system, condition, user) counts DuckDB builds for the pipeline
view (:mod:`personagap.analysis.pipeline`) are :mod:`personagap.store.pipeline_counts`' functions; this module
keeps the names its readers import.
"""

from __future__ import annotations

from personagap.store.pipeline_counts import (
    REFERENCE_TABLE,
    REJECTED,
    SELECTED,
    UNSURE,
    cascade_items,
    duplicate_pairs,
    judge_columns,
    llm_selections,
    reference_table,
    stage1_counts,
    stage2_counts,
    stage3_counts,
)

__all__ = ["REFERENCE_TABLE", "REJECTED", "SELECTED", "UNSURE", "cascade_items", "duplicate_pairs", "judge_columns",
           "llm_selections", "reference_table", "stage1_counts", "stage2_counts", "stage3_counts"]
