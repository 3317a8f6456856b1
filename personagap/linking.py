"""The keys that link one user's items across a pipeline's three stages (stored in ``items.payload``).

A personalization pipeline extracts attributes (stage 1), selects the ones a prompt needs (stage 2) and
writes an answer from them (stage 3). Tracing a stage-3 failure back to an upstream error needs the same
attribute to carry the same id at every stage, and each answer to say what it was written from:

* ``attribute_id`` (stage-1 and stage-2 items): one id per (user, attribute), the same at both stages;
  a release that has no ids gets :func:`attribute_id` of (user id, attribute text);
* ``attributes_used`` (stage-3 items): the ids of the attributes the answer was written from;
* ``input_condition`` (stage-3 items): what those attributes were (:data:`INPUT_CONDITIONS`);
* ``system``: the model or pipeline that produced the output (the extractor at stage 1, the generator at
  stage 3; a selector's stage-2 choices are labels of a rater of kind :data:`SYSTEM_KIND`);
* ``prompt_id`` (stage-3 items): ``<user_id>_<prompt_index>`` (:func:`prompt_id`), the stage-2 prompt the
  answer is for;
* ``personalized`` (stage-3 pairs of a personalised and a generic answer): the side, ``A`` or ``B``, that
  holds the personalised answer.

This module is the one place these names and rules live; importers write them and the pipeline view reads them.
"""

from __future__ import annotations

import hashlib
from typing import Final, Literal

ATTRIBUTE_ID = "attribute_id"
ATTRIBUTES_USED = "attributes_used"
INPUT_CONDITION = "input_condition"
SYSTEM = "system"
PROMPT_ID = "prompt_id"
PERSONALIZED = "personalized"

InputCondition = Literal["pipeline", "oracle", "none"]
INPUT_CONDITIONS: tuple[InputCondition, ...] = ("pipeline", "oracle", "none")
"""What a stage-3 answer was written from: the pipeline's own selection, the attributes humans selected
(an "oracle" input: the stage is run on correct upstream output), or no attribute at all (the generic answer)."""

SYSTEM_KIND: Final = "system"
"""The rater kind of a pipeline's own outputs stored as labels (``comparable.SYSTEM_KINDS``): never a judge."""

ATTRIBUTES_USED_SEPARATOR = ";"
"""How a text cell lists several attribute ids (CSV has no lists)."""


def attribute_id(user_id: str, attribute: str) -> str:
    """The id of one of a user's attributes, for releases that give none: a pure function of both texts.

    Args:
        user_id: The user's id in the release.
        attribute: The attribute sentence, exactly as the release spells it.

    Returns:
        ``attr-`` and 16 hex digits; the same (user, text) always gets the same id, at every stage.
    """
    # Length-prefixed parts: ("ab", "c") and ("a", "bc") hash apart.
    blob = f"{len(user_id)}:{user_id}{len(attribute)}:{attribute}".encode()
    return "attr-" + hashlib.sha256(blob).hexdigest()[:16]


def prompt_id(user_id: str, prompt_index: int) -> str:
    """``<user_id>_<prompt_index>``: how a stage-3 answer names the stage-2 prompt it answers."""
    return f"{user_id}_{prompt_index}"
