"""The vocabularies (issue 31): how labels, rater kinds and human sets are spelled, defined here only.

Every other module imports these names (records, the store's SQL, the stages, the judges, the importers); a
literal tuple of them anywhere else is a second definition (tests/core/test_vocabulary.py greps for them). How a
dataset's labels are read against its scale (coercion, checks) is :mod:`personagap.scales`.
"""

from __future__ import annotations

from typing import Literal, get_args

from personagap.linking import SYSTEM_KIND

__all__ = ["ATTRIBUTE_KINDS", "DECISIVE", "FILE_RATER_KINDS", "HUMAN_KINDS", "HUMAN_SETS", "JUDGE_KINDS",
           "PAIRWISE_LABELS", "RATER_KINDS", "RELEVANCE_LABELS", "REVERSED", "SINGLE_KINDS", "SYSTEM_KINDS",
           "VERIFICATION_LABELS", "YES_NO", "HumanSet", "RaterKind"]

#: Label vocabularies per stage. A label outside its vocabulary is a data error.
RELEVANCE_LABELS: tuple[str, str] = ("yes", "no")
"""Stage 2 (relevance), as a label file lists them."""
YES_NO: tuple[str, str] = ("no", "yes")
"""The yes/no scale, in code order (``no`` = 0, ``yes`` = 1): :data:`RELEVANCE_LABELS` as a scale's categories."""
VERIFICATION_LABELS: tuple[str, str, str] = ("ok", "bad", "unsure")
"""Stage 1 (extraction): the verdicts on an extracted attribute."""
PAIRWISE_LABELS: tuple[str, str, str] = ("A", "B", "tie")
"""Stage 3 (response), pairwise: which answer won."""
DECISIVE: tuple[str, str] = ("A", "B")
"""The pairwise labels that pick an answer (every pairwise label but the tie)."""
REVERSED = "+reversed"
"""Condition suffix of a pairwise judge's run with the two answers swapped (feeds swap consistency; no judge of
its own)."""

RaterKind = Literal["human", "human_majority", "llm", "trained", "baseline", "system"]
"""Who gave a label."""
RATER_KINDS: tuple[str, ...] = get_args(RaterKind)
FILE_RATER_KINDS: tuple[str, ...] = ("human", "llm", "trained", SYSTEM_KIND)
"""The rater kinds a label file may declare (a majority and a baseline are computed, never imported); ``system``:
a pipeline's own output (e.g. a selector's stage-2 choices), scored against people, never a judge."""
HUMAN_KINDS: tuple[str, ...] = ("human", "human_majority")
"""Rater kinds that are people (one person, or a release's majority of people)."""
JUDGE_KINDS: tuple[str, ...] = ("llm", "trained", "baseline")
"""Rater kinds that are judges. Kept apart in every grouping: an LLM, a trained model, a trivial baseline."""
SYSTEM_KINDS: tuple[str, ...] = (SYSTEM_KIND,)
"""Rater kinds that are a pipeline's own outputs stored as labels (e.g. the attributes a release's pipeline selected
for a prompt): a system under evaluation, scored against people in the pipeline view, never a judge or a reference."""

HumanSet = Literal["blind", "anchored"]
"""Which humans form the reference: ``blind`` (what judges are scored against) or ``anchored`` (saw an LLM's label
first; reported apart)."""
HUMAN_SETS: tuple[HumanSet, ...] = get_args(HumanSet)

SINGLE_KINDS: tuple[str, ...] = ("persona_use", "single")
"""Payload kinds of stage-3 items that are one answer to rate (the rest are pairs)."""

ATTRIBUTE_KINDS: tuple[str | None, ...] = (None, "extracted")
"""Payload kinds of stage-1 items that are extracted attributes (None: a release's attributes carry no kind)."""
