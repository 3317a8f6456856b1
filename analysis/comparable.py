"""The one rule that decides which stored labels may be compared with humans, and how.

Every report, ``personagap diagnose`` and the dashboard take their labels through this module (the SQL
predicates for queries, the pandas masks for frames), so they cannot disagree about what counts. An individual
person's label (a vote, never a stored majority) is :func:`individual_human_sql` / :func:`individual_human_mask`,
written once here.

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

The human reference of an item is :func:`reference_sql` (every report, ``diagnose``, the dashboard, ``plan`` and
``optimize`` read it from the store through it). :func:`reference_labels` is the same rule for labels already in
memory with no store query to run it (the trained judges' training frames, the dashboard's pilot page, the
per-label test oracles); the tests hold the two equal. Blind and anchored references are built apart with the
same steps and never mixed:

1. **A stored majority stands.** When the item has ``human_majority`` rows of that protocol and they all
   give the same label, that label is the reference. A stored majority summarises voters whose own labels
   the store does not hold (Re-Centering's three crowd annotators), so an individual label given later
   (a team member on the Annotate page, a second import) cannot join that vote: one new "no" cannot be
   weighed against voters nobody can see, and letting it in would make every judge's kappa move each time
   somebody adds one label. Such later labels are **extra raters**: they count in human–human agreement,
   the alternative-annotator test and the Annotate page's comparison, never in the reference.
2. **Conflicting stored majorities say nothing.** When the item's stored majority rows disagree (two
   files, two aggregations), none of them is the reference (never "the first row read", which depends on
   row order); the item is treated as if it had no stored majority.
3. **Otherwise the individual votes decide**: :func:`majority_label` over one vote per person
   (:func:`one_vote_per_rater`; a person's anchored labels ranked by :data:`ANCHORED_ORDER`; the anchored
   three-way rating is never a vote). A tie, or no vote, leaves the item without a reference (undecided).
   Here every voter is known, so a later individual label simply joins the vote.

Rater groups (:func:`rater_group`): every human is ``human``; a judge's group is its kind, so an
agreement table has ``human–llm`` and ``human–trained`` rows, never a trained model among the LLMs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal

import pandas as pd

# The vocabularies (defined in personagap.vocabulary), re-exported: the rule's users read them here too.
from personagap.vocabulary import HUMAN_KINDS as HUMAN_KINDS
from personagap.vocabulary import JUDGE_KINDS as JUDGE_KINDS
from personagap.vocabulary import SYSTEM_KINDS as SYSTEM_KINDS
from personagap.vocabulary import YES_NO as YES_NO
from personagap.vocabulary import HumanSet

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
ANCHORED_ORDER: tuple[str, ...] = (SHOWN_LLM, CONVERTED_SHOWN_LLM, ANCHORED_MAJORITY)
"""When one person has several anchored labels of an item, the first condition here counts (the label given
after the reveal, then its task-3 copy): one vote per person. The three-way rating (:data:`SHOWN_LLM_RATING`)
answers another question than yes/no and is never a vote."""
IN_SAMPLE = "in-sample"
"""A trained/optimised judge's label on an item of its own training users: stored, never compared."""

Role = Literal["blind_human", "anchored_human", "judge", "excluded", "system", "other"]


def role(rater_kind: str, condition: str) -> Role:
    """Classify one label by the rule in this module's docstring.

    Args:
        rater_kind: ``human``, ``human_majority``, ``llm``, ``trained``, ``baseline`` or ``system``.
        condition: The protocol the label was given under ('' is the standard, blind one).

    Returns:
        ``blind_human`` (a reference), ``anchored_human`` (report apart), ``judge`` (comparable),
        ``excluded`` (in-sample judge labels), ``system`` (a pipeline's own output) or ``other`` (humans
        answering another question).
    """
    if rater_kind in HUMAN_KINDS:
        if condition == BLIND:
            return "blind_human"
        return "anchored_human" if condition in ANCHORED else "other"
    if rater_kind in JUDGE_KINDS:
        return "excluded" if condition == IN_SAMPLE else "judge"
    return "system" if rater_kind in SYSTEM_KINDS else "other"


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
    out[kind.isin(SYSTEM_KINDS)] = "system"
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


def individual_human_sql(which: HumanSet = "blind", alias: str = "l") -> str:
    """SQL predicate (static text): an individual person's label (kind ``human``) of protocol ``which``.

    The one definition of "an individual human vote" (blind: the individual blind human vote): a stored
    ``human_majority`` summarises voters the store does not hold and is never one person's label. Callers add
    ``label IS NOT NULL`` where failures must go; the anchored three-way rating answers another question and
    callers that count votes leave it out too (:data:`SHOWN_LLM_RATING`).

    Args:
        which: ``blind`` or ``anchored`` (:func:`blind_human_sql` / :func:`anchored_human_sql`).
        alias: The labels table's alias.
    """
    protocol = blind_human_sql(alias) if which == "blind" else anchored_human_sql(alias)
    return f"({protocol} AND {alias}.rater_kind = 'human')"


def blind_vote_sql(alias: str = "l") -> str:
    """SQL predicate (static text): an individual blind human vote, :func:`individual_human_sql` of ``blind``."""
    return individual_human_sql("blind", alias)


def individual_human_mask(labels: pd.DataFrame, which: HumanSet = "blind") -> pd.Series:
    """Rows of ``labels`` that :func:`individual_human_sql` selects (the pandas form, for in-memory frames)."""
    protocol = blind_human_mask(labels) if which == "blind" else anchored_human_mask(labels)
    return protocol & (labels["rater_kind"] == "human")


def comparable_judge_sql(alias: str = "l") -> str:
    """SQL predicate (static text) selecting judge labels comparable with humans of table alias ``alias``."""
    return f"({alias}.rater_kind IN ({_sql_list(JUDGE_KINDS)}) AND {alias}.condition <> '{IN_SAMPLE}')"


def rater_group(rater_kind: str) -> str:
    """The group a rater is counted in: ``human`` for human kinds, otherwise its own judge kind.

    Args:
        rater_kind: The label's rater kind.

    Returns:
        ``human``, ``llm``, ``trained`` or ``baseline`` (unknown kinds keep their name: never merged).
    """
    return "human" if rater_kind in HUMAN_KINDS else rater_kind


def judge_display(rater: str, condition: str) -> str:
    """The one display name of a judge, also its key when reports and pages join rows.

    The rater, plus ``[condition]`` when the protocol is not the default one.

    Args:
        rater: The label's rater key (judge, version and model for LLM judges).
        condition: The protocol the labels were given under ('' is the standard one).
    """
    return f"{rater} [{condition}]" if condition else rater


def judge_display_sql(alias: str = "l") -> str:
    """SQL expression (static text): :func:`judge_display` of the label of table alias ``alias``.

    For queries that group or join by judge: the same text as :func:`judge_display`, so a figure computed in
    SQL and one computed in pandas carry the same key.
    """
    return (f"(CASE WHEN {alias}.condition = '' THEN {alias}.rater "
            f"ELSE {alias}.rater || ' [' || {alias}.condition || ']' END)")


def reference_labels(labels: pd.DataFrame, which: HumanSet = "blind") -> pd.Series:
    """Per item, the human reference label under the rule in this module's docstring, from a frame in memory.

    The pandas form of :func:`reference_sql`, kept for callers that hold labels and no store (see the module
    docstring); reports read the reference from the store.

    Args:
        labels: Frame with ``item_id``, ``rater_kind``, ``condition``, ``label`` (failures may be present;
            rows without a label are ignored).
        which: ``blind`` (the reference judges are scored against) or ``anchored`` (reported apart).

    Returns:
        Item id -> label; items whose humans tie are absent (undecided).
    """
    mask = blind_human_mask(labels) if which == "blind" else anchored_human_mask(labels)
    humans = labels[mask & labels["label"].notna() & (labels["condition"] != SHOWN_LLM_RATING)]
    if humans.empty:
        return pd.Series(dtype=object, name="human")
    is_major = humans["rater_kind"] == "human_majority"
    # Stored majorities count only where the item's rows agree (the SQL twin uses count(DISTINCT label) = 1).
    # Group operations, not a Python function per item: at 10^6 labels the lambdas took most of a minute.
    major = humans[is_major].groupby("item_id")["label"]
    stored = major.first()[major.nunique() == 1]
    rest = one_vote_per_rater(humans[~is_major & ~humans["item_id"].isin(stored.index)])
    ref = pd.concat([stored, majority_labels(rest["item_id"], rest["label"].astype(str))])
    return ref.rename("human").astype(object)


def majority_labels(items: pd.Series, votes: pd.Series) -> pd.Series:
    """:func:`majority_label` of every item at once: item id -> its unique most frequent vote, ties absent.

    Args:
        items: The item of each vote.
        votes: One vote per row (one per human rater of the item; missing votes left out by the caller).

    Returns:
        Labels indexed by ``item_id`` in sorted item order; undecided items (a tie for the most) are absent.
    """
    counts = pd.DataFrame({"item_id": items.to_numpy(), "label": votes.to_numpy()}).groupby(
        ["item_id", "label"]).size()
    top = counts[counts == counts.groupby(level="item_id").transform("max")]
    unique = top[top.groupby(level="item_id").transform("size") == 1]
    return pd.Series(unique.index.get_level_values("label").to_numpy(dtype=object),
                     index=unique.index.get_level_values("item_id"), name="label", dtype=object)


def one_vote_per_rater(rows: pd.DataFrame) -> pd.DataFrame:
    """One label per (item, rater): where a person has several (anchored) labels, :data:`ANCHORED_ORDER` decides.

    Args:
        rows: Labels with ``item_id``, ``rater`` and ``condition`` columns.
    """
    # Conditions outside ANCHORED_ORDER (the blind one) have no rank and sort after every ranked one.
    rank = rows["condition"].map({c: i for i, c in enumerate(ANCHORED_ORDER)})
    ordered = rows.assign(_rank=rank).sort_values("_rank", kind="stable", na_position="last")
    return ordered.drop_duplicates(["item_id", "rater"]).drop(columns="_rank")


def reference_sql(which: HumanSet = "blind", alias: str = "l") -> str:
    """CTEs (static text, ending in ``reference(item_id, human)``) computing the reference in SQL.

    The same rule as :func:`reference_labels`: the stored majority where the item's stored majority rows
    agree, otherwise the unique most frequent individual label (ties give no row). ``alias`` names the
    labels table inside the CTEs.
    """
    humans = blind_human_sql(alias) if which == "blind" else anchored_human_sql(alias)
    order = ("CASE " + " ".join(f"WHEN {alias}.condition = '{c}' THEN {i}" for i, c in enumerate(ANCHORED_ORDER))
             + f" ELSE {len(ANCHORED_ORDER)} END")
    return f"""
    ref_major AS (
        SELECT {alias}.item_id, any_value({alias}.label) AS human
        FROM labels {alias}
        WHERE {humans} AND {alias}.rater_kind = 'human_majority' AND {alias}.label IS NOT NULL
        GROUP BY {alias}.item_id HAVING count(DISTINCT {alias}.label) = 1
    ),
    one_vote AS (
        -- Hash aggregates, not windows (half the time at 10^7 labels): a rater's first label in protocol order.
        SELECT {alias}.item_id, arg_min({alias}.label, {order}) AS label
        FROM labels {alias} ANTI JOIN ref_major USING (item_id)
        WHERE {individual_human_sql(which, alias)} AND {alias}.label IS NOT NULL
          AND {alias}.condition <> '{SHOWN_LLM_RATING}'
        GROUP BY {alias}.item_id, {alias}.rater
    ),
    human_votes AS (
        SELECT item_id, label, count(*) AS c FROM one_vote GROUP BY item_id, label
    ),
    ref_vote AS (
        -- The top label when its count beats the runner-up's (max(c, 2): the two largest counts).
        SELECT item_id, arg_max(label, c) AS human FROM human_votes
        GROUP BY item_id HAVING len(max(c, 2)) = 1 OR max(c, 2)[1] > max(c, 2)[2]
    ),
    reference AS (SELECT * FROM ref_major UNION ALL SELECT * FROM ref_vote)
"""


MAJORITY_RULE = ("majority = the unique most frequent label among an item's humans; a tie (e.g. 2 yes, 2 no) is "
                 "undecided and the item has no reference")
"""The one majority rule in words, for report headers and JSON."""


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


OTHER_CATEGORY = "__other__"
"""Stands in for the unseen rest of a scale of which only one category is known (keeps tables 2x2)."""


def categories_for(labels: pd.DataFrame, declared: Iterable[str] | None = None) -> list[str]:
    """The one rule for the category set of a dataset's comparisons: its scale, not what one judge used.

    Agreement figures that count categories (Gwet's AC1, PABAK) change with K, so every judge of a
    dataset is scored over the same K: the categories the dataset declares (the generic importer's
    ``labels:<dataset>:<stage>`` meta) plus every label its humans (blind or anchored) or judges gave
    on items a human labelled (the items comparisons are made on; a stage-1 extractor's attributes on
    unlabelled chunks are no category). A judge that never answers "tie" on PRISM is still scored over
    A/B/tie. Labels answering another question (humans under another condition, the anchored three-way
    rating) are not part of the scale. The SQL twin of the item filter is :func:`human_labelled_sql`.

    Args:
        labels: One dataset's labels with ``rater_kind``, ``condition`` and ``label``, and ``item_id`` unless
            the caller already kept only items a human labelled (other datasets must be filtered out by the
            caller; failures, label null, are ignored).
        declared: The dataset's declared categories, if any.

    Returns:
        Sorted categories; ``["no", "yes"]`` for any subset of yes/no; a lone other category is paired with
        :data:`OTHER_CATEGORY`.
    """
    role_of = roles(labels)
    on_scale = (role_of.isin(["blind_human", "anchored_human", "judge", "excluded"])
                & (labels["condition"].fillna(BLIND) != SHOWN_LLM_RATING) & labels["label"].notna())
    if "item_id" in labels.columns:
        human = role_of.isin(["blind_human", "anchored_human"]) & labels["label"].notna()
        on_scale &= labels["item_id"].isin(set(labels.loc[human, "item_id"]))
    found = {str(v) for v in pd.unique(labels.loc[on_scale, "label"])} | {str(c) for c in declared or ()}
    if found <= set(YES_NO):
        return list(YES_NO)
    if len(found) < 2:
        found.add(OTHER_CATEGORY)
    return sorted(found)


def human_labelled_sql(alias: str = "l") -> str:
    """SQL predicate (static text): the label of alias ``alias`` is on an item a blind or anchored human labelled.

    The item filter of :func:`categories_for`, for queries that hand it distinct labels.
    """
    return (f"({alias}.item_id IN (SELECT h.item_id FROM labels h WHERE ({blind_human_sql('h')} OR "
            f"{anchored_human_sql('h')}) AND h.label IS NOT NULL))")
