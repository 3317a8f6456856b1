"""Adapter for the PersonaFeedback release (Tao et al., 2025; ``PersonalAILab/PersonaFeedback``).

Layout, as published::

    ROOT/persona/*.jsonl                              one explicit persona per row, keyed by user_id
    ROOT/data/{general,specific}/{easy,medium,hard}.jsonl
                                                      rows: user_id, question, chosen, reject

``chosen`` is the answer the human annotators judged to fit the persona better. The split
(general vs persona-specific questions) comes from the folder, the difficulty tier from
the file name. (The published repository spells one folder ``spedific``; it is read as
``specific``.)

The release has no answer order, so each pair is shown as A/B in an order drawn from a
hash of its content (seed 0): about half the pairs have the chosen answer in position B,
which keeps "always A" at chance. The human label is the position of ``chosen``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from personagap.human_data._jsonl import (
    DataError,
    Release,
    Row,
    clip,
    no_rows,
    read_bytes,
    read_jsonl,
    real_path,
    require_exists,
)
from personagap.human_data.prism import ResponseImport, import_run, pairwise_record
from personagap.records import Item, Label, User, item_id

DATASET = "personafeedback"
ADAPTER = "personafeedback"
HUMAN_RATER = "personafeedback-annotators"
QUESTION = "Which of the two answers fits this persona better?"
"""What PersonaFeedback's annotators decided (``chosen`` over ``reject``)."""
SPLITS = {"general": "general", "specific": "specific", "spedific": "specific"}
TIERS = ("easy", "medium", "hard")
ORDER_SEED = 0
_PROFILE_FIELDS = ("persona", "profile", "description")


def chosen_is_b(key: str, seed: int = ORDER_SEED) -> bool:
    """Whether the chosen answer is shown second, from a hash of the pair (deterministic, recorded)."""
    return hashlib.sha256(f"{seed}:{key}".encode()).digest()[0] % 2 == 1


def _user_id(row: Row) -> str:
    value: str | int = row.get("user_id", (str, int))
    text = str(value).strip()
    if not text:
        raise row.error("user_id", "is empty")
    return text


def persona_text(row: Row) -> str:
    """A persona row's profile as text: its persona/profile string, else its other fields as 'key: value' lines."""
    for name in _PROFILE_FIELDS:
        if isinstance(row.data.get(name), str):
            return row.text(name)
    lines = []
    for key, value in row.data.items():
        if key == "user_id" or value is None:
            continue
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"{key}: {shown}")
    if not lines:
        raise row.error("persona", "missing: the row holds no profile fields besides user_id")
    return "\n".join(lines)


def load_personafeedback(root: str | Path) -> ResponseImport:
    """Read and validate a PersonaFeedback release folder.

    Args:
        root: The folder holding ``persona/`` and ``data/``.

    Returns:
        The validated batch (not yet written) and per-file counts.

    Raises:
        DataError: A file or row deviates from the release format (names file, line and field).
    """
    root = require_exists(root)
    persona_dir, data_dir = root / "persona", root / "data"
    if not persona_dir.is_dir() or not data_dir.is_dir():
        raise DataError(root, None, None, "not a PersonaFeedback release: expected persona/ and data/ folders")
    result = ResponseImport()
    release = Release.of(ADAPTER, root)
    # The release is the unit, wherever it lies: a file deleted from it goes.
    result.batch.releases.append(release.scope)
    result.batch.folders.append(real_path(root))
    personas: dict[str, tuple[str, str]] = {}
    for file in sorted(persona_dir.glob("*.jsonl")):
        count = 0
        for row in read_jsonl(file):
            user = _user_id(row)
            if user in personas:
                raise row.error("user_id", f"persona '{clip(user)}' defined twice (first at {personas[user][1]})")
            personas[user] = (persona_text(row), f"{file}:{row.line}")
            count += 1
        if not count:
            raise no_rows(file)
        result.files[str(file)] = count
    if not personas:
        raise DataError(persona_dir, None, None, "no persona rows in persona/*.jsonl")

    data_files = sorted(data_dir.glob("*/*.jsonl"))
    if not data_files:
        raise DataError(data_dir, None, None, "no data/<split>/<tier>.jsonl files")
    seen: dict[str, str] = {}
    for file in data_files:
        split = SPLITS.get(file.parent.name)
        if split is None:
            raise DataError(file, None, None, f"unknown split folder '{clip(file.parent.name)}'; expected general "
                                              "or specific")
        tier = file.stem
        if tier not in TIERS:
            raise DataError(file, None, None, f"unknown tier '{clip(tier)}'; expected easy, medium or hard")
        data = read_bytes(file)
        run = import_run(file, HUMAN_RATER, {"split": split, "tier": tier}, data, release=release)
        result.batch.runs.append(run)
        count = 0
        for row in read_jsonl(file, data):
            _add_pair(row, result, personas, seen, split, tier, run.run_id)
            count += 1
        if not count:
            raise no_rows(file)
        result.files[str(file)] = count
    result.batch.meta.update(pairwise_record(DATASET, QUESTION))
    return result


def _add_pair(row: Row, result: ResponseImport, personas: dict[str, tuple[str, str]], seen: dict[str, str],
              split: str, tier: str, run_id: str) -> None:
    user = _user_id(row)
    if user not in personas:
        raise row.error("user_id", f"no persona '{clip(user)}' in persona/*.jsonl")
    question = row.text("question")
    chosen = row.text("chosen")
    reject = row.text("reject")
    if chosen == reject:
        raise row.error("reject", "is identical to chosen")
    iid = item_id(DATASET, "response", user, question, chosen, reject)
    if iid in seen:
        raise row.error("question", f"duplicate pair (first at {seen[iid]})")
    seen[iid] = f"{row.path}:{row.line}"
    swapped = chosen_is_b(iid)
    answer_a, answer_b = (reject, chosen) if swapped else (chosen, reject)
    profile = personas[user][0]
    payload: dict[str, Any] = {"kind": "pairwise", "question": question, "answer_a": answer_a,
                               "answer_b": answer_b, "profile": profile, "split": split, "tier": tier,
                               "order_seed": ORDER_SEED}
    result.batch.items[iid] = Item(item_id=iid, dataset=DATASET, stage="response", user_id=user, payload=payload)
    result.batch.users[(DATASET, user)] = User(dataset=DATASET, user_id=user, profile_text=profile)
    result.batch.labels.append(Label(item_id=iid, rater=HUMAN_RATER, rater_kind="human_majority",
                                     label="B" if swapped else "A", raw="chosen", run_id=run_id))
