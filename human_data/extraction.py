"""Generic JSONL import of a team's own stage-1 output: extracted attributes, human verdicts, gold.

So a team can measure its extraction pipeline without running an LLM here. One line per
(user, extractor)::

    {"user_id": "u1",                     # required
     "extractor": "our-pipeline-v3",      # required: who extracted (becomes the attributes' extractor)
     "dataset": "our-team",               # optional, default "extraction-import"
     "conversation": [                    # optional; required when attributes cite turn ids
        {"turn_id": "1", "role": "user", "text": "I'm vegetarian."}, ...],
     "attributes": [                      # required, may be []
        {"attribute": "The user is vegetarian.",
         "turn_ids": ["1"],               # optional; each must be a conversation turn_id
         "confidence": 0.9,               # optional, in [0, 1]
         "verdicts": [                    # optional: verdicts on this attribute
            {"rater": "ann1", "label": "ok", "reason": "...", "kind": "human"}]}],
                                          # label ok | bad | unsure; kind human (default) | llm
     "gold": [{"category": "diet", "value": "vegetarian"}]}   # optional, non-empty if given

``bad`` means unsupported by the conversation or broader than its evidence (over-generalised).
Turn ids may be strings or integers (stored as strings). A user's ``conversation`` and
``gold`` may be repeated on lines of other extractors but must then be identical.

Records written (stage ``extraction``; item kinds as in :mod:`personagap.judges.extraction`):
one ``conversation`` item per user, one ``extracted`` item per attribute (keyed by extractor,
user and normalised text), one ``gold`` item per gold entry, one label per verdict. Every
problem raises :class:`DataError` naming file, line and field; nothing is written then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personagap.analysis.extraction import ExtractedAttribute, attributes_label, normalise_attribute
from personagap.datasets import default_question
from personagap.human_data._jsonl import (
    DataError,
    Release,
    Row,
    clip,
    cut,
    declare,
    import_run,
    no_rows,
    read_bytes,
    read_jsonl,
    real_path,
    require_exists,
)
from personagap.records import VERIFICATION_LABELS, Item, Label, RaterKind, Stage, User, item_id
from personagap.store import ImportBatch

ADAPTER = "extraction-jsonl"
DEFAULT_DATASET = "extraction-import"
STAGE: Stage = "extraction"
VERDICT_KINDS: tuple[str, ...] = ("human", "llm")


@dataclass
class ExtractionImport:
    """What a JSONL import read: the batch to write and what it holds."""

    batch: ImportBatch = field(default_factory=ImportBatch)
    files: dict[str, int] = field(default_factory=dict)
    attributes: int = 0
    verdicts: int = 0
    gold: int = 0

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        lines = [f"Read {len(self.files)} extraction file(s):"]
        lines += [f"  {p}: {n} rows" for p, n in self.files.items()]
        lines.append(f"  {self.attributes} extracted attributes, {self.verdicts} verdicts, "
                     f"{self.gold} gold preferences")
        if self.batch.written is not None:
            lines.append("  database: " + self.batch.written.render())
        return "\n".join(lines)


def extraction_files(path: str | Path) -> list[Path]:
    """``path`` itself (a .jsonl file) or the .jsonl files in it (a folder)."""
    path = require_exists(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise DataError(path, None, None, "no .jsonl file in this folder")
        return files
    return [path]


def load_extraction(path: str | Path) -> ExtractionImport:
    """Read and validate extraction JSONL file(s) in the format above.

    Args:
        path: A ``.jsonl`` file or a folder of them.

    Returns:
        The validated batch (not yet written) and counts.

    Raises:
        DataError: A row deviates from the format; the message names file, line and field.
    """
    result = ExtractionImport()
    files = extraction_files(path)
    # A team's own files, not a published release: its folder's name tells one team's output from another's.
    release = Release.of(ADAPTER, path, named_by_folder=True)
    if Path(path).is_dir():
        result.batch.releases.append(release.scope)
        result.batch.folders.append(real_path(path))
    state = _State()
    for file in files:
        _load_file(file, result, state, release)
    # A team's own users: whether they are real is the team's to say (import labels --origin), not this import's.
    for dataset in sorted({item.dataset for item in result.batch.items.values()}):
        declare(result.batch, STAGE, dataset, "verification", "nominal", VERIFICATION_LABELS,
                default_question(STAGE, "verification"), with_origin=False)
    return result


@dataclass
class _State:
    seen_rows: dict[tuple[str, str, str], str] = field(default_factory=dict)
    conversations: dict[tuple[str, str], tuple[Any, str]] = field(default_factory=dict)
    golds: dict[tuple[str, str], tuple[Any, str]] = field(default_factory=dict)
    mentioned: set[str] = field(default_factory=set)
    """Items the current file's rows mention (shared conversations and gold included)."""


def _load_file(path: Path, result: ExtractionImport, state: _State, release: Release) -> None:
    data = read_bytes(path)
    run = import_run(path, data, None, {"adapter": ADAPTER}, release=release)
    result.batch.runs.append(run)
    count = 0
    for row in read_jsonl(path, data):
        _load_row(row, result, state, run.run_id)
        count += 1
    # The file owns every item its rows mention: a re-import of a shorter file removes what it lost.
    result.batch.own(run.run_id, state.mentioned)
    state.mentioned = set()
    if count == 0:
        raise no_rows(path)
    result.files[str(path)] = count


def _same(state: dict[tuple[str, str], tuple[Any, str]], key: tuple[str, str], value: Any, row: Row,
          fld: str) -> bool:
    """Record ``value`` for ``key``; True if new. A different value for a known key is an error."""
    known = state.get(key)
    if known is None:
        state[key] = (value, f"{row.path}:{row.line}")
        return True
    if known[0] != value:
        raise row.error(fld, f"differs from user {clip(key[1])}'s {fld} at {known[1]}")
    return False


def _load_row(row: Row, result: ExtractionImport, state: _State, run_id: str) -> None:
    batch = result.batch
    user = row.text("user_id")
    extractor = row.text("extractor")
    dataset = row.text("dataset", optional=True) or DEFAULT_DATASET
    unit = user
    key = (dataset, user, extractor)
    if key in state.seen_rows:
        raise row.error("extractor", f"user {clip(user)} already has a row by extractor {cut(extractor)} "
                                     f"at {state.seen_rows[key]}")
    state.seen_rows[key] = f"{row.path}:{row.line}"
    batch.users.setdefault((dataset, user), User(dataset=dataset, user_id=user))

    turn_ids: set[str] | None = None
    if "conversation" in row.data:
        turns: list[dict[str, str]] = []
        for t in row.objects("conversation", allow_empty=False):
            tid = str(t.get("turn_id", (str, int))).strip()
            if not tid:
                raise t.error("turn_id", "is empty")
            if any(x["turn_id"] == tid for x in turns):
                raise t.error("turn_id", f"turn id {cut(tid)} appears twice in this conversation")
            turns.append({"turn_id": tid, "role": t.text("role"), "text": t.text("text", allow_empty=True)})
        if not any(t["role"].strip().lower() == "user" and t["text"].strip() for t in turns):
            raise row.error("conversation", "has no turn with role 'user' and text: nothing to extract from")
        turn_ids = {t["turn_id"] for t in turns}
        cid = item_id(dataset, STAGE, "conversation", unit, 0)
        state.mentioned.add(cid)
        if _same(state.conversations, (dataset, user), turns, row, "conversation"):
            batch.items[cid] = Item(item_id=cid, dataset=dataset, stage=STAGE, user_id=user, position=0,
                                    payload={"kind": "conversation", "unit": unit, "session": 0, "turns": turns})

    if "gold" in row.data:
        golds = []
        for g in row.objects("gold", allow_empty=False):
            golds.append((g.text("category"), g.text("value").strip()))
        if len(set(golds)) != len(golds):
            raise row.error("gold", "lists the same (category, value) twice")
        gold_ids = [item_id(dataset, STAGE, "gold", unit, 0, category, value) for category, value in golds]
        state.mentioned.update(gold_ids)
        if _same(state.golds, (dataset, user), golds, row, "gold"):
            for (category, value), gid in zip(golds, gold_ids, strict=True):
                batch.items[gid] = Item(item_id=gid, dataset=dataset, stage=STAGE, user_id=user, attribute=value,
                                        position=0, payload={"kind": "gold", "unit": unit, "session": 0,
                                                             "category": category, "value": value})
                result.gold += 1

    seen_attrs: dict[str, int] = {}
    found: list[ExtractedAttribute] = []
    for pos, a in enumerate(row.objects("attributes")):
        text = a.text("attribute").strip()
        norm = normalise_attribute(text)
        if norm in seen_attrs:
            raise a.error("attribute", f"same attribute as attributes[{seen_attrs[norm]}] of this row")
        seen_attrs[norm] = pos
        cited = _turn_ids(a, turn_ids)
        conf = a.number("confidence", optional=True)
        iid = item_id(dataset, STAGE, "extracted", extractor, unit, norm)
        state.mentioned.add(iid)
        batch.items[iid] = Item(item_id=iid, dataset=dataset, stage=STAGE, user_id=user, attribute=text, position=pos,
                                payload={"kind": "extracted", "unit": unit, "extractor": extractor,
                                         "turn_ids": cited, "confidence": conf})
        result.attributes += 1
        found.append(ExtractedAttribute(text, tuple(cited), conf))
        raters: set[str] = set()
        for v in a.objects("verdicts") if "verdicts" in a.data else []:
            rater = v.text("rater")
            if rater in raters:
                raise v.error("rater", f"rater {cut(rater)} gives two verdicts on this attribute")
            raters.add(rater)
            kind: RaterKind = v.choice("kind", VERDICT_KINDS) if "kind" in v.data else "human"  # type: ignore[assignment]
            label = v.choice("label", VERIFICATION_LABELS)
            batch.labels.append(Label(item_id=iid, rater=rater, rater_kind=kind, label=label,
                                      reason=v.text("reason", optional=True, allow_empty=True) or None, run_id=run_id))
            result.verdicts += 1


    # The whole row is one "chunk" the extractor answered (max_chars 0 = imported, not chunked here), so the
    # report knows this user was processed even when the extractor found nothing.
    chunk_id = item_id(dataset, STAGE, "chunk", unit, 0, 0)
    state.mentioned.add(chunk_id)
    batch.items.setdefault(chunk_id, Item(item_id=chunk_id, dataset=dataset, stage=STAGE, user_id=user, position=0,
                                          payload={"kind": "chunk", "unit": unit, "chunk": 0, "max_chars": 0,
                                                   "turn_ids": None}))
    batch.labels.append(Label(item_id=chunk_id, rater=extractor, rater_kind="llm", label=attributes_label(found),
                              run_id=run_id))


def _turn_ids(a: Row, known: set[str] | None) -> list[str]:
    if "turn_ids" not in a.data or a.data["turn_ids"] is None:
        return []
    values = a.get("turn_ids", list)
    out: list[str] = []
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise a.error(f"turn_ids[{i}]", f"expected a string or integer turn id, got {type(value).__name__}")
        tid = str(value).strip()
        if known is None:
            raise a.error(f"turn_ids[{i}]", "cites a turn, but the row has no 'conversation' to check it against")
        if tid not in known:
            raise a.error(f"turn_ids[{i}]", f"turn id {cut(tid)} does not exist in the row's conversation")
        if tid not in out:
            out.append(tid)
    return out
