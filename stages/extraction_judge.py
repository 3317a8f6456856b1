"""Running a stage-1 judge (extract, verify, match) on stored items, and turning extractor answers into items."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from personagap.analysis.extraction import extracted_items
from personagap.stages.extraction_build import load_items, unit_gold
from personagap.store import ImportBatch, StoreError, opened, write_batch
from personagap.store.item_reads import item_labels

if TYPE_CHECKING:
    from personagap.judges.runner import LMConfig, RunSummary


def judge_extraction(db: str | Path, judge_name: str, lm: LMConfig, *, datasets: Sequence[str] | None = None,
                     splits: Sequence[str] | None = None, extractor: str | None = None,
                     max_chars: int | None = None, concurrency: int = 8, limit: int | None = None,
                     max_retries: int = 4, progress: bool = True) -> RunSummary:
    """Run a stage-1 judge on stored items.

    * ``extract``: one call per chunk of each history (conversation items); ``limit`` keeps the
      first N histories (a history is only scored when all its chunks are judged). Afterwards the
      answers become extracted-attribute items.
    * ``verify``: one call per extracted attribute whose history is stored; ``limit`` = calls.
    * ``match``: one call per (extracted attribute, gold preference) of the same history.

    Args:
        db: The DuckDB file.
        judge_name: ``extract``, ``verify`` or ``match``.
        lm: Model settings.
        datasets: Only these datasets (default: all).
        splits: Only histories of these splits (LAPS ``train`` / ``val``; default: all).
        extractor: For verify/match, only this extractor's attributes (default: all).
        max_chars: Chunk budget for ``extract`` (default :data:`~personagap.judges.extraction.DEFAULT_MAX_CHARS`).
        concurrency: Calls in flight.
        limit: See above.
        max_retries: Retries on transient faults.
        progress: Show a progress bar.

    Raises:
        StoreError: Nothing to judge.
    """
    from personagap.judges import get_judge
    from personagap.judges.extraction import (
        DEFAULT_MAX_CHARS,
        Turn,
        Unit,
        extraction_tasks,
        match_item,
        match_tasks,
        verify_tasks,
    )
    from personagap.judges.runner import run_judge

    judge = get_judge(judge_name)
    with opened(db, read_only=True) as con:
        items = load_items(con, datasets=datasets)
    convs = items[items["kind"] == "conversation"]
    if splits is not None:
        keep_units = {u for u, p in zip(convs["unit"], convs["payload"], strict=True) if p.get("split") in splits}
        items = items[items["unit"].isin(keep_units)]
        convs = convs[convs["unit"].isin(keep_units)]
    history: dict[tuple[str, str], tuple[str, list[Turn]]] = {}
    for (dataset, unit), g in convs.groupby(["dataset", "unit"], sort=True):
        g = g.sort_values("position")
        turns = [Turn(t["turn_id"], t["role"], t["text"]) for p in g["payload"] for t in p["turns"]]
        history[(str(dataset), str(unit))] = (str(g["user_id"].iloc[0]), turns)
    source = ",".join(sorted(set(items["dataset"]))) or str(db)

    if judge_name == "extract":
        units = [Unit(d, u, user, tuple(turns)) for (d, u), (user, turns) in history.items()]
        units = units[:limit] if limit is not None else units
        if not units:
            raise StoreError(f"{db}: no conversations to extract from; import a LAPS release or an extraction JSONL "
                             "with conversations first")
        tasks, chunk_items = extraction_tasks(units, max_chars or DEFAULT_MAX_CHARS)
        _write_items(db, chunk_items)
        summary = run_judge(db, judge, tasks, lm, concurrency=concurrency, max_retries=max_retries,
                            progress=progress, source=source)
        materialise_extractions(db, summary.rater)
        return summary

    extracted = items[items["kind"] == "extracted"]
    if extractor is not None:
        extracted = extracted[extracted["payload"].map(lambda p: p.get("extractor") == extractor)]
    if judge_name == "verify":
        triples = [(i, str(a), history[(d, u)][1]) for i, a, d, u
                   in zip(extracted["item_id"], extracted["attribute"], extracted["dataset"], extracted["unit"],
                          strict=True) if (d, u) in history]
        if not triples:
            raise StoreError(f"{db}: no extracted attributes with a stored conversation to verify")
        return run_judge(db, judge, verify_tasks(triples), lm, concurrency=concurrency, limit=limit,
                         max_retries=max_retries, progress=progress, source=source)
    gold = items[items["kind"] == "gold"]
    gold = gold.assign(category=gold["payload"].map(lambda p: p.get("category")),
                       value=gold["payload"].map(lambda p: p.get("value")))
    gold_by_unit = {k: unit_gold(g) for k, g in gold.groupby(["dataset", "unit"], sort=True)}
    pairs, new_items = [], []
    for a in extracted.itertuples(index=False):
        for g in gold_by_unit.get((a.dataset, a.unit), gold.iloc[0:0]).itertuples(index=False):
            it = match_item(str(a.dataset), str(a.user_id), str(a.unit), str(a.item_id), str(g.item_id))
            new_items.append(it)
            pairs.append((it, str(a.attribute), f"{g.category}: {g.value}"))
    if not pairs:
        raise StoreError(f"{db}: no (extracted attribute, gold preference) pair of the same user to match")
    tasks = match_tasks(pairs)
    chosen = {t.key for t in (tasks[:limit] if limit is not None else tasks)}
    _write_items(db, [i for i in new_items if i.item_id in chosen])
    return run_judge(db, judge, tasks, lm, concurrency=concurrency, limit=limit, max_retries=max_retries,
                     progress=progress, source=source)


def _write_items(db: str | Path, items: Sequence[Any]) -> None:
    batch = ImportBatch()
    for it in items:
        batch.items[it.item_id] = it
    write_batch(db, batch)


def materialise_extractions(db: str | Path, rater: str | None = None) -> int:
    """Turn stored extractor answers on chunks into extracted-attribute items (idempotent).

    Args:
        db: The DuckDB file.
        rater: Only this extractor rater (default: every rater with labels on chunks).

    Returns:
        The number of extracted-attribute items written.
    """
    with opened(db, read_only=True) as con:
        chunks = load_items(con, kinds=("chunk",))
        labels = item_labels(con, chunks["item_id"].tolist())
    if rater is not None:
        labels = labels[labels["rater"] == rater]
    labels = labels.astype(object).where(labels.notna(), None)
    new = extracted_items(chunks.to_dict("records"), labels.to_dict("records"))
    _write_items(db, new)
    return len(new)
