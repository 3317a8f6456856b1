"""The one rule that decides which stored labels may be compared with humans, and how.

Every report, ``personagap diagnose`` and the dashboard take their labels through this module (the
pandas mask for frames, the SQL predicates for queries), so they cannot disagree about what counts.

A label has a rater kind and a condition (the protocol it was given under). The rule:

* **Blind human reference** — ``human`` / ``human_majority`` labels under the standard condition
  :data:`BLIND` (``''``): given without seeing any judge's label. Only these are ever reported as
  human–human agreement, a human ceiling, or the reference a judge is scored against.
* **Anchored human labels** — ``human`` / ``human_majority`` labels under a condition in
  :data:`ANCHORED` (the person saw an LLM's label first, e.g. the pilot's task 2, the task-3 rows
  copied from it, or an Annotate-page label given after the reveal). Reported separately and
  labelled "anchored", never mixed with blind ones.
* **Judges** — ``llm``, ``trained`` and ``baseline`` labels, each kind kept apart (a trained model is
  never counted as an LLM). A judge label is comparable under any condition except
  :data:`IN_SAMPLE` (a trained or optimised judge labelling its own training users): those are
  stored for the record and excluded from every comparison.
* Human labels under any other condition answer another question (USR's ``overall`` rating, say)
  and are neither a reference nor anchored.

Majorities follow one rule, :func:`majority_label`: the unique most frequent label among the
humans of an item; a tie (e.g. two "yes", two "no") is *undecided* and gives no reference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal

import pandas as pd

BLIND = ""
"""The standard, blind condition: no judge label was shown before this label was given."""
SHOWN_LLM = "shown-llm"
"""A human labelled after seeing an LLM's label (pilot task 2; an Annotate-page label after the reveal)."""
SHOWN_LLM_RATING = "shown-llm-rating"
"""The pilot task-2 three-way rating, also given after seeing an LLM's label."""
CONVERTED_SHOWN_LLM = "shown-llm-converted"
"""Pilot task-3 rows whose note says ``[converted from task2]``: copies of labels given after seeing an LLM."""
ANCHORED_MAJORITY = "anchored-majority"
"""A human majority computed from votes of which at least one was anchored by an LLM's label."""
ANCHORED: frozenset[str] = frozenset({SHOWN_LLM, SHOWN_LLM_RATING, CONVERTED_SHOWN_LLM, ANCHORED_MAJORITY})
"""Conditions of human labels given after seeing an LLM's label: never reported as blind."""
IN_SAMPLE = "in-sample"
"""A trained/optimised judge's label on an item of its own training users: stored, never compared."""

HUMAN_KINDS: tuple[str, ...] = ("human", "human_majority")
JUDGE_KINDS: tuple[str, ...] = ("llm", "trained", "baseline")
"""Rater kinds that are judges. Kept apart in every grouping: an LLM, a trained model, a trivial baseline."""

Role = Literal["blind_human", "anchored_human", "judge", "excluded", "other"]


def role(rater_kind: str, condition: str) -> Role:
    """Classify one label by the rule in this module's docstring.

    Args:
        rater_kind: ``human``, ``human_majority``, ``llm``, ``trained`` or ``baseline``.
        condition: The protocol the label was given under ('' is the standard, blind one).

    Returns:
        ``blind_human`` (a reference), ``anchored_human`` (report apart), ``judge`` (comparable),
        ``excluded`` (in-sample judge labels) or ``other`` (humans answering another question).
    """
    if rater_kind in HUMAN_KINDS:
        if condition == BLIND:
            return "blind_human"
        return "anchored_human" if condition in ANCHORED else "other"
    if rater_kind in JUDGE_KINDS:
        return "excluded" if condition == IN_SAMPLE else "judge"
    return "other"


def roles(labels: pd.DataFrame) -> pd.Series:
    """:func:`role` of every row of a frame with ``rater_kind`` and ``condition`` columns (vectorised)."""
    kind = labels["rater_kind"].astype(str)
    cond = labels["condition"].fillna(BLIND).astype(str)
    is_human = kind.isin(HUMAN_KINDS)
    is_judge = kind.isin(JUDGE_KINDS)
    out = pd.Series("other", index=labels.index, dtype=object)
    out[is_human & (cond == BLIND)] = "blind_human"
    out[is_human & cond.isin(ANCHORED)] = "anchored_human"
    out[is_judge & (cond != IN_SAMPLE)] = "judge"
    out[is_judge & (cond == IN_SAMPLE)] = "excluded"
    return out


def blind_human_mask(labels: pd.DataFrame) -> pd.Series:
    """Rows that are blind human labels (the only human reference)."""
    return roles(labels) == "blind_human"


def anchored_human_mask(labels: pd.DataFrame) -> pd.Series:
    """Rows that are human labels given after seeing an LLM's label."""
    return roles(labels) == "anchored_human"


def comparable_judge_mask(labels: pd.DataFrame) -> pd.Series:
    """Rows that are judge labels comparable with humans (every judge kind, in-sample labels excluded)."""
    return roles(labels) == "judge"


def _sql_list(values: Iterable[str]) -> str:
    # Constants of this module only (never user input), quoted for SQL.
    return ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(values))


def blind_human_sql(alias: str = "l") -> str:
    """SQL predicate (static text) selecting blind human labels of table alias ``alias``."""
    return f"({alias}.rater_kind IN ({_sql_list(HUMAN_KINDS)}) AND {alias}.condition = '{BLIND}')"


def anchored_human_sql(alias: str = "l") -> str:
    """SQL predicate (static text) selecting anchored human labels of table alias ``alias``."""
    return f"({alias}.rater_kind IN ({_sql_list(HUMAN_KINDS)}) AND {alias}.condition IN ({_sql_list(ANCHORED)}))"


def comparable_judge_sql(alias: str = "l") -> str:
    """SQL predicate (static text) selecting judge labels comparable with humans of table alias ``alias``."""
    return f"({alias}.rater_kind IN ({_sql_list(JUDGE_KINDS)}) AND {alias}.condition <> '{IN_SAMPLE}')"


def majority_label(votes: Iterable[str]) -> str | None:
    """The one majority rule: the unique most frequent label, or None (undecided) on a tie or no votes.

    Args:
        votes: One label per human rater of an item (unparsed/missing labels left out by the caller).

    Returns:
        The label more humans gave than any other, or None when two or more labels tie for the most.
    """
    counts = Counter(votes).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]
