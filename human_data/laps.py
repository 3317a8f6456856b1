"""Adapter for LAPS (github ``informagi/laps``): human-written dialogues with the preferences the human stated.

Parses the release exactly as published::

    ROOT/{movie,recipe}_dataset_{train,val}.json

Each file is a JSON list of workers ``{"worker_id", "topic", "sessions": [{"dialogue": [{"role",
"turn_number", "message"}], "preferences": {category: [values]}, "task_setting"}]}``. The
preferences were written (or checked) by the human who held the conversation: they are the
gold targets an attribute extractor is scored against.

Records written (dataset ``laps``, stage ``extraction``; see :mod:`personagap.judges.extraction`):

* one ``conversation`` item per session (turn ids ``s<session>t<turn_number>``),
* one ``gold`` item per (session, category, value), with ``attribute`` = the value,
* one :class:`~personagap.records.User` per worker.

The extraction unit (``payload.unit``) is ``<topic>/<worker_id>``: a worker's sessions on one
topic. Bootstrap CIs cluster on the worker. A session with an empty ``preferences`` object is
kept (the release has a few: the human stated nothing) and counted; an empty value *list*, a
session without user turns, or a malformed field is a :class:`DataError` naming the file and
the JSON path (``[worker].sessions[session]...``); nothing is written then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from personagap.human_data._jsonl import (
    DataError,
    Release,
    Row,
    clip,
    cut,
    declare,
    import_run,
    parse_json,
    read_bytes,
    real_path,
    require_exists,
)
from personagap.records import VERIFICATION_LABELS, Item, Stage, User, item_id
from personagap.store import ImportBatch

ADAPTER = "laps"
DATASET = "laps"
STAGE: Stage = "extraction"
ROLES = ("User", "Assistant")
QUESTION = ("Is this attribute supported by the conversation? (ok / bad / unsure) Gold: the preferences the user "
            "who held the conversation wrote or checked.")
"""What LAPS's extractors are judged on: an attribute verified against the dialogue, recall against the gold."""
_FILE = re.compile(r"^(?P<topic>[a-z]+)_dataset_(?P<split>[a-z]+)\.json$")


@dataclass
class LapsImport:
    """What a LAPS import read: the batch to write and what it holds."""

    batch: ImportBatch = field(default_factory=ImportBatch)
    files: dict[str, int] = field(default_factory=dict)
    """Per file, the number of workers read."""
    sessions: int = 0
    gold: int = 0
    sessions_without_preferences: int = 0
    duplicate_values: int = 0
    """Preference values listed twice in one category of one session (kept once)."""

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        lines = [f"Read {len(self.files)} LAPS file(s):"]
        lines += [f"  {p}: {n} workers" for p, n in self.files.items()]
        lines.append(f"  {self.sessions} sessions, {self.gold} gold preferences, "
                     f"{self.sessions_without_preferences} sessions with no stated preference")
        if self.duplicate_values:
            lines.append(f"  note: {self.duplicate_values} preference values repeated within a category; kept once")
        if self.batch.written is not None:
            lines.append("  database: " + self.batch.written.render())
        return "\n".join(lines)


def laps_files(path: str | Path) -> list[Path]:
    """The release files under ``path`` (a folder) or ``path`` itself (one file)."""
    path = require_exists(path)
    if not path.is_dir():
        return [path]  # read_bytes names what else it may be
    files = sorted(p for p in path.glob("*.json") if _FILE.match(p.name))
    if not files:
        raise DataError(path, None, None, "not a LAPS release: no <topic>_dataset_<split>.json file")
    return files


def load_laps(path: str | Path) -> LapsImport:
    """Read and validate LAPS release files (a folder, or one file).

    Args:
        path: The folder holding ``<topic>_dataset_<split>.json`` files, or one such file.

    Returns:
        The validated batch (not yet written) and counts.

    Raises:
        DataError: A file deviates from the release format; the message names the file and
            the JSON path of the offending field.
    """
    result = LapsImport()
    files = laps_files(path)
    release = Release.of(ADAPTER, path)
    if Path(path).is_dir():
        result.batch.releases.append(release.scope)
        result.batch.folders.append(real_path(path))
    seen_units: dict[str, str] = {}
    for file in files:
        _load_file(file, result, seen_units, release)
    declare(result.batch, STAGE, DATASET, "verification", "nominal", VERIFICATION_LABELS, QUESTION)
    return result


def _load_file(path: Path, result: LapsImport, seen_units: dict[str, str], release: Release) -> None:
    match = _FILE.match(path.name)
    split = match["split"] if match else None
    raw = read_bytes(path)
    data = parse_json(path, raw)
    if not isinstance(data, list):
        raise DataError(path, None, None, f"expected a JSON list of workers, got {type(data).__name__}")
    if not data:
        raise DataError(path, None, None, "the file holds no workers: nothing to import")
    run = import_run(path, raw, None, {"adapter": ADAPTER}, release=release)
    result.batch.runs.append(run)
    before = set(result.batch.items)
    for w_index, obj in enumerate(data):
        if not isinstance(obj, dict):
            raise DataError(path, None, f"[{w_index}]", f"expected an object, got {type(obj).__name__}")
        _load_worker(Row(obj, path, None, f"[{w_index}]."), path, split, match["topic"] if match else None,
                     result, seen_units)
    # The file owns what it holds: a re-import of a shorter file removes the sessions and gold it lost.
    result.batch.own(run.run_id, set(result.batch.items) - before)
    result.files[str(path)] = len(data)


def _load_worker(w: Row, path: Path, split: str | None, file_topic: str | None, result: LapsImport,
                 seen_units: dict[str, str]) -> None:
    worker = str(w.get("worker_id", (str, int))).strip()
    if not worker:
        raise w.error("worker_id", "is empty")
    topic = w.text("topic")
    if file_topic is not None and topic != file_topic:
        raise w.error("topic", f"{cut(topic)} differs from the file name's topic {file_topic!r}")
    unit = f"{topic}/{worker}"
    where = f"{path}:{w.prefix.rstrip('.')}"
    if unit in seen_units:
        raise w.error("worker_id", f"worker {clip(worker)} already appears for topic {clip(topic)} at "
                                   f"{seen_units[unit]}")
    seen_units[unit] = where
    result.batch.users.setdefault((DATASET, worker), User(dataset=DATASET, user_id=worker))
    for s_index, s in enumerate(w.objects("sessions", allow_empty=False)):
        turns = []
        numbers: set[int] = set()
        for t in s.objects("dialogue", allow_empty=False):
            role = t.choice("role", ROLES)
            number = t.integer("turn_number")
            if number in numbers:
                raise t.error("turn_number", f"turn {number} appears twice in this dialogue")
            numbers.add(number)
            turns.append({"turn_id": f"s{s_index}t{number}", "role": role, "text": t.text("message", allow_empty=True)})
        if not any(t["role"] == "User" and t["text"].strip() for t in turns):
            raise s.error("dialogue", "has no user turn with text: nothing to extract from")
        prefs = s.get("preferences", dict)
        setting = s.text("task_setting", optional=True, allow_empty=True)
        conv_id = item_id(DATASET, STAGE, "conversation", unit, s_index)
        result.batch.items[conv_id] = Item(
            item_id=conv_id, dataset=DATASET, stage=STAGE, user_id=worker, position=s_index,
            payload={"kind": "conversation", "unit": unit, "topic": topic, "split": split, "session": s_index,
                     "task_setting": setting, "turns": turns})
        result.sessions += 1
        if not prefs:
            result.sessions_without_preferences += 1
        for category, values in prefs.items():
            fld = f"preferences.{category}"
            if not isinstance(values, list):
                raise s.error(fld, f"expected a list of values, got {type(values).__name__}")
            if not values:
                raise s.error(fld, "is an empty preference list")
            seen: set[str] = set()
            for v_index, value in enumerate(values):
                if not isinstance(value, str) or not value.strip():
                    raise s.error(f"{fld}[{v_index}]", f"expected a non-empty string, got {cut(value)}")
                value = value.strip()
                if value in seen:
                    result.duplicate_values += 1
                    continue
                seen.add(value)
                gid = item_id(DATASET, STAGE, "gold", unit, s_index, category, value)
                result.batch.items[gid] = Item(
                    item_id=gid, dataset=DATASET, stage=STAGE, user_id=worker, attribute=value, position=s_index,
                    payload={"kind": "gold", "unit": unit, "topic": topic, "split": split, "session": s_index,
                             "category": category, "value": value})
                result.gold += 1
