"""Adapter for the USR PersonaChat ratings (``pc_usr_data.json``, Mehri & Eskenazi 2020).

The release is one JSON list of contexts; each has the persona ``fact`` lines, the dialogue
``context``, the three ``annotators`` who rated it, and five ``responses`` (one per
``model``), each with one rating per annotator for ``Uses Knowledge`` (0/1: does the
response use the persona), ``Overall`` (1-5) and four more qualities.

Every rating is imported as a per-rater label (rater_kind 'human'): ``Uses Knowledge`` as
yes/no under condition '' (the question the ``persona-use`` judge answers), the others
under their own condition ('overall', 'engaging', ...). Items are (context, model)
responses; a context is the cluster for confidence intervals.

What the raters were asked is stored as data with the import, not written into the report:
the dataset's record (:func:`personagap.datasets.record_meta`) holds the Uses Knowledge question
on a yes/no scale, and the other ratings stay *conditions* of the same items, stored as rated
aspects (:func:`personagap.human_data.labels.aspects_meta`), each with its question and scale
(Overall: ordinal 1-5). They are not datasets of their own: they rate the very same responses,
and a dataset's items are its own, so a dataset per rating would copy every response six times.

A JSON file has no useful line numbers, so errors name the JSON path instead:
``pc_usr_data.json:[12]: field 'responses[3].Overall[1]': ...``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from personagap.datasets import record_meta
from personagap.human_data._jsonl import DataError, Release, Row, cut, parse_json, read_bytes, require_exists
from personagap.human_data.labels import RatedAspectSpec, aspects_meta
from personagap.human_data.prism import ResponseImport, import_run
from personagap.records import DatasetRecord, DatasetScale, Item, Label, User, item_id
from personagap.vocabulary import YES_NO

DATASET = "usr-personachat"
ADAPTER = "usr"
FILE_NAME = "pc_usr_data.json"
USES_KNOWLEDGE = "Uses Knowledge"
#: Rating key -> (label condition, allowed values). Ranges as in the USR annotation guidelines.
RATINGS: dict[str, tuple[str, tuple[int, ...]]] = {
    USES_KNOWLEDGE: ("", (0, 1)),
    "Overall": ("overall", (1, 2, 3, 4, 5)),
    "Understandable": ("understandable", (0, 1)),
    "Natural": ("natural", (1, 2, 3)),
    "Maintains Context": ("maintains-context", (1, 2, 3)),
    "Engaging": ("engaging", (1, 2, 3)),
}
#: Rating key -> (the question as the USR guidelines put it, scale kind). Uses Knowledge is the dataset's question.
QUESTIONS: dict[str, tuple[str, str]] = {
    USES_KNOWLEDGE: ("Does the response use the persona's facts? (USR 'Uses Knowledge', yes/no)", "nominal"),
    "Overall": ("Overall quality of the response (USR 'Overall', 1-5)", "ordinal"),
    "Understandable": ("Is the response understandable in the context of the dialogue? (USR, 0/1)", "nominal"),
    "Natural": ("Is the response naturally written? (USR, 1-3)", "ordinal"),
    "Maintains Context": ("Is the response a valid continuation of the dialogue? (USR, 1-3)", "ordinal"),
    "Engaging": ("Is the response engaging rather than dull? (USR, 1-3)", "ordinal"),
}


def usr_meta() -> dict[str, str]:
    """The meta entries the import stores: the dataset's record and the other ratings as rated aspects."""
    record = DatasetRecord(stage="response", dataset=DATASET, item_kind="single",
                           scale=DatasetScale(kind="nominal", categories=YES_NO),
                           question=QUESTIONS[USES_KNOWLEDGE][0], declared=True)
    aspects = [RatedAspectSpec(condition=condition, question=QUESTIONS[key][0], scale=DatasetScale(
        kind="ordinal" if QUESTIONS[key][1] == "ordinal" else "nominal", categories=tuple(map(str, allowed))))
        for key, (condition, allowed) in RATINGS.items() if key != USES_KNOWLEDGE]
    return record_meta(record) | aspects_meta(DATASET, aspects)
_PERSONA_PREFIX = "your persona:"


def persona_facts(fact: str) -> list[str]:
    """Split the release's ``fact`` text into persona sentences (without the 'your persona:' prefix)."""
    out = []
    for line in fact.splitlines():
        text = line.strip()
        if text.lower().startswith(_PERSONA_PREFIX):
            text = text[len(_PERSONA_PREFIX):].strip()
        if text:
            out.append(text)
    return out


def context_user(context: str) -> str:
    """The cluster id of a dialogue context (the release has no ids)."""
    return "usr-" + hashlib.sha256(context.encode("utf-8")).hexdigest()[:12]


def load_usr(path: str | Path) -> ResponseImport:
    """Read and validate the USR PersonaChat ratings.

    Args:
        path: ``pc_usr_data.json`` or the folder holding it.

    Returns:
        The validated batch (not yet written).

    Raises:
        DataError: The file deviates from the release format (names file, JSON index and field).
    """
    file = require_exists(path)
    if file.is_dir():
        file = file / FILE_NAME
    raw = read_bytes(file)
    data = parse_json(file, raw)
    if not isinstance(data, list) or not data:
        raise DataError(file, None, None, "expected a non-empty JSON list of contexts")

    result = ResponseImport()
    run = import_run(file, None, data=raw, release=Release.of(ADAPTER, file))
    result.batch.runs.append(run)
    seen: dict[str, str] = {}
    for index, entry in enumerate(data):
        where = f"[{index}]"
        if not isinstance(entry, dict):
            raise DataError(file, where, None, f"expected an object, got {type(entry).__name__}")
        # The JSON index stands in for a line number in every error of this file.
        row = Row(entry, file, where)
        context = row.text("context")
        fact = row.text("fact")
        facts = persona_facts(fact)
        if not facts:
            raise row.error("fact", "holds no persona sentence")
        annotators = row.get("annotators", list)
        if len(annotators) < 1 or not all(isinstance(a, str) and a.strip() for a in annotators):
            raise row.error("annotators", "expected a non-empty list of annotator names")
        if len(set(annotators)) != len(annotators):
            raise row.error("annotators", f"lists a rater twice: {cut(annotators)}")
        user = context_user(context)
        result.batch.users[(DATASET, user)] = User(dataset=DATASET, user_id=user, profile_text="\n".join(facts))
        responses = row.objects("responses", allow_empty=False)
        for position_in_context, r in enumerate(responses):
            model = r.text("model")
            response = r.text("response")
            iid = item_id(DATASET, "response", context, model)
            if iid in seen:
                raise r.error("model", f"a second response by {cut(model)} for this context (first at {seen[iid]})")
            seen[iid] = f"{where}.{r.prefix.rstrip('.')}"
            result.batch.items[iid] = Item(item_id=iid, dataset=DATASET, stage="response", user_id=user,
                                           position=position_in_context, payload={
                                               "kind": "persona_use", "facts": facts, "context": context,
                                               "response": response, "model": model})
            for key, (condition, allowed) in RATINGS.items():
                values = r.get(key, list)
                if len(values) != len(annotators):
                    raise r.error(key, f"has {len(values)} ratings for {len(annotators)} annotators")
                for position, (rater, value) in enumerate(zip(annotators, values, strict=True)):
                    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
                        raise r.error(f"{key}[{position}]", f"unknown value {cut(value)}; expected one of "
                                                            f"{', '.join(map(str, allowed))}")
                    label = ("yes" if value else "no") if key == USES_KNOWLEDGE else str(value)
                    result.batch.labels.append(Label(item_id=iid, rater=rater, rater_kind="human",
                                                     condition=condition, label=label, raw=str(value),
                                                     run_id=run.run_id))
    result.files[str(file)] = len(data)
    result.batch.meta.update(usr_meta())
    return result
