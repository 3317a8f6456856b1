"""Adapter for the "Re-Centering Humans in LLM Personalization" release.

Parses the release exactly as published (layout in ``shared/DATA.md``)::

    ROOT/stage2/task5_items.jsonl          profiles, prompts and the pipeline's selected attributes (``items``)
    ROOT/stage2/task6_items.jsonl          human-majority relevance per attribute + generic/personalised answers
    ROOT/stage2/llm_relevance/NAME.jsonl   one LLM's per-attribute YES/NO
    ROOT/stage3_responses/eval_results_task5_{mode}_{model}.jsonl   answers under three input conditions
    ROOT/pilot/task3_relevance_clf.jsonl   pilot pairs with the human majority
    ROOT/pilot/annotations/annotator_NN_task{1,2,3}.jsonl   per-annotator pilot labels
    ROOT/pilot/llm_relevance/NAME.jsonl    LLM labels on the pilot items

Relevance items are keyed by (user_id, prompt_index, attribute text) and carry the attribute's id
(:func:`personagap.linking.attribute_id`), the key that links them to the stage-3 answers that used the
attribute. Nothing is written until every file has been read and checked; then one transaction writes it.

The parts: dataset names and the record builder (:mod:`.recenter_build`), stage 2 with the pipeline's own
selection (:mod:`.recenter_stage2`), stage 3's input conditions (:mod:`.recenter_stage3`), the pilot
(:mod:`.recenter_pilot`, whose docstring gives the pilot's label conditions).
"""

from __future__ import annotations

from pathlib import Path

from personagap.human_data._jsonl import DataError, Release, declare, real_path, require_exists
from personagap.human_data.recenter_build import (
    ADAPTER,
    HUMAN_MAJORITY,
    PILOT,
    PIPELINE_RATER,
    RECORDS,
    STAGE2,
    STAGE3,
    Builder,
    Coverage,
    RecenterImport,
)
from personagap.human_data.recenter_pilot import load_pilot
from personagap.human_data.recenter_stage2 import load_stage2
from personagap.human_data.recenter_stage3 import load_stage3

__all__ = ["ADAPTER", "HUMAN_MAJORITY", "PILOT", "PIPELINE_RATER", "RECORDS", "STAGE2", "STAGE3", "Coverage",
           "RecenterImport", "Release", "load_recenter"]


def load_recenter(root: str | Path) -> RecenterImport:
    """Read and validate a Re-Centering release folder.

    Args:
        root: The folder holding ``stage2/`` (with ``stage3_responses/``, if any) and/or ``pilot/``.

    Returns:
        The validated batch (not yet written), file counts and join coverage.

    Raises:
        DataError: Any file deviates from the release format; the message names
            file, line and field.
    """
    root = require_exists(root)
    stage2, pilot, stage3 = root / "stage2", root / "pilot", root / "stage3_responses"
    if not stage2.is_dir() and not pilot.is_dir():
        if stage3.is_dir():
            raise DataError(stage3, None, None, "stage3_responses/ needs stage2/task5_items.jsonl (the prompts its "
                                                "answers are for)")
        raise DataError(root, None, None, "not a Re-Centering release: expected a stage2/ or pilot/ folder")
    result = RecenterImport()
    release = Release.of(ADAPTER, root)
    # The release is the unit, wherever it lies: a file deleted from it goes (folders: runs named by path).
    result.batch.releases.append(release.scope)
    result.batch.folders.append(real_path(root))
    builder = Builder(result, release)
    linked = load_stage2(stage2, builder) if stage2.is_dir() else None
    if stage3.is_dir():
        load_stage3(stage3, builder, linked)
    if pilot.is_dir():
        load_pilot(pilot, builder)
    result.coverage = _coverage(builder.labelled)
    present = {(item.stage, item.dataset) for item in result.batch.items.values()}
    for (stage, dataset), (kind, scale, categories, question) in RECORDS.items():
        if (stage, dataset) in present:
            declare(result.batch, stage, dataset, kind, scale, categories, question)
    return result


def _coverage(labelled: dict[tuple[str, str, str], set[str]]) -> list[Coverage]:
    """Pairs each LLM rater shares with the human majority, per dataset."""
    human = {ds: ids for (kind, ds, _), ids in labelled.items() if kind == "human_majority"}
    return [
        Coverage(dataset=ds, rater=rater, llm_pairs=len(ids), human_pairs=len(human.get(ds, set())),
                 matched=len(ids & human.get(ds, set())))
        for (kind, ds, rater), ids in sorted(labelled.items()) if kind == "llm"
    ]
