"""Tiny valid releases of every importer's format, written from invented text (no shared data).

The malformed-input and fuzz tests start from these and break one thing at a time. Each builder
returns ``{relative path: rows}``; :func:`write_release` writes JSONL (or JSON for LAPS/USR).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personagap.human_data.extraction import load_extraction
from personagap.human_data.laps import load_laps
from personagap.human_data.personafeedback import load_personafeedback
from personagap.human_data.prism import load_prism
from personagap.human_data.recenter import load_recenter
from personagap.human_data.usr import load_usr

ATTRS = ["The user keeps bees.", "The user cycles to work.", "The user speaks Welsh."]
CONVERTED = " [converted from task2]"


def recenter() -> dict[str, Any]:
    task5, task6, llm = [], [], []
    for user, prompts in {"u1": [0, 1], "u2": [0]}.items():
        profile = [{"attribute": a, "reason": "invented", "confidence": 0.9} for a in ATTRS]
        for p in prompts:
            task5.append({"user_id": user, "prompt_index": p, "prompt_text": f"Invented prompt {p}",
                          "profile_attributes": profile,
                          "items": [{"attribute": ATTRS[0], "relevance": 0.5, "expected_behavior": "x"}]})
            task6.append({"model_tag": "m", "user_id": user, "prompt_id": f"{user}_{p}", "prompt_text": "x",
                          "attributes": [{"attribute": a, "is_relevant": i == 0} for i, a in enumerate(ATTRS)],
                          "response_no_context": "g", "response_personalized": "p"})
            llm.append({"model": "mini", "sample_index": len(llm), "prompt_index": p, "user_id": user,
                        "items": [{"attribute": a, "relevant": i != 2, "raw_answer": "YES", "full_output": "YES"}
                                  for i, a in enumerate(ATTRS)]})
    clf = [{"prompt_index": 0, "sample_index": 0, "attribute": a, "prompt_text": "Pilot prompt", "label": int(i == 0),
            "split": "train", "n_annotators": 2, "human_yes_rate": [1.0, 0.0, 0.5][i]} for i, a in enumerate(ATTRS)]
    pilot_llm = [{"model": "mini", "sample_index": 0, "user_id": "p1",
                  "items": [{"attribute": a, "relevant": True, "raw_answer": "YES", "full_output": "YES"}
                            for a in ATTRS]}]

    def task3(annotator: str, note: str) -> list[dict[str, Any]]:
        return [{"task": "3", "index": 0, "user_id": "p1", "prompt_index": 0, "note": note, "flagged": False,
                 "annotator": annotator, "timestamp": "t",
                 "relevance_judgments": [{"attribute": a, "relevant": i == 0} for i, a in enumerate(ATTRS)]}]

    return {
        "stage2/task5_items.jsonl": task5, "stage2/task6_items.jsonl": task6,
        "stage2/llm_relevance/mini-llm.jsonl": llm,
        "pilot/task3_relevance_clf.jsonl": clf, "pilot/llm_relevance/mini-llm.jsonl": pilot_llm,
        "pilot/annotations/annotator_01_task3.jsonl": task3("annotator_01", ""),
        "pilot/annotations/annotator_02_task3.jsonl": task3("annotator_02", CONVERTED),
        "pilot/annotations/annotator_01_task1.jsonl": [
            {"task": "1", "index": 0, "annotator": "annotator_01", "timestamp": "t",
             "attr_judgments": [{"judgment": "ok", "note": ""}, {"judgment": "bad", "note": "vague"}]}],
        "pilot/annotations/annotator_01_task2.jsonl": [
            {"task": "2", "index": 0, "user_id": "p1", "prompt_index": 0, "note": "", "annotator": "annotator_01",
             "relevance_judgments": [{"attribute": ATTRS[0], "was_relevant": True, "rating": "optional",
                                      "is_relevant": True}]}],
    }


def prism() -> dict[str, Any]:
    rows = []
    for k, truth in enumerate(["A", "B", "A"]):
        answer = ["A", "A", "["][k]
        rows.append({"user_info": f"Invented participant {k}: age 30, likes maps.", "question": f"Question {k}?",
                     "asst_A": f"First answer {k}.", "asst_B": f"Second answer {k}, longer.", "ground_truth": truth,
                     "answer": answer, "certainty": "3", "acc": answer == truth, "conversation_type": "unguided"})
    return {"prism_all_features_mini.jsonl": rows}


def usr() -> dict[str, Any]:
    contexts = []
    for c in range(2):
        contexts.append({"context": f"Invented dialogue {c}.\nHi there.", "fact": "your persona: i keep bees.\n"
                         "your persona: i cycle to work.", "annotators": ["rater_1", "rater_2"],
                         "responses": [{"model": m, "response": f"Reply {c} by {m}.", "Uses Knowledge": [1, 0],
                                        "Overall": [4, 3], "Understandable": [1, 1], "Natural": [3, 2],
                                        "Maintains Context": [3, 3], "Engaging": [2, 2]} for m in ("m1", "m2")]})
    return {"pc_usr_data.json": contexts}


def personafeedback() -> dict[str, Any]:
    return {
        "persona/personas.jsonl": [{"user_id": "u1", "persona": "An invented beekeeper who cycles."},
                                   {"user_id": 2, "name": "Sam", "interests": ["jazz"]}],
        "data/general/easy.jsonl": [
            {"user_id": "u1", "question": "What should I plant?", "chosen": "Lavender for your bees.",
             "reject": "Grass."},
            {"user_id": 2, "question": "Any music tips?", "chosen": "Try a jazz standard.", "reject": "No."}],
        "data/specific/hard.jsonl": [
            {"user_id": "u1", "question": "How do I commute?", "chosen": "By bike.", "reject": "By car."}],
    }


def laps() -> dict[str, Any]:
    workers = []
    for w in range(2):
        workers.append({"worker_id": f"w{w}", "topic": "movie", "sessions": [{
            "dialogue": [{"role": "User", "turn_number": 0, "message": "I love old westerns."},
                         {"role": "Assistant", "turn_number": 1, "message": "Noted."}],
            "preferences": {"genre": ["westerns"]}, "task_setting": "invented"}]})
    return {"movie_dataset_train.json": workers}


def extraction() -> dict[str, Any]:
    rows = [{"user_id": f"u{k}", "extractor": "ours", "dataset": "invented",
             "conversation": [{"turn_id": "1", "role": "user", "text": "I'm vegetarian and I keep bees."}],
             "attributes": [{"attribute": "The user is vegetarian.", "turn_ids": ["1"], "confidence": 0.9,
                             "verdicts": [{"rater": "ann1", "label": "ok"}]}],
             "gold": [{"category": "diet", "value": "vegetarian"}]} for k in range(2)]
    return {"ours.jsonl": rows}


@dataclass(frozen=True)
class Importer:
    """One importer: its CLI name, its release builder, and the file most cases break."""

    command: str
    build: Any
    main_file: str
    json_file: bool = False


IMPORTERS = {
    "recenter": Importer("recenter", recenter, "stage2/task5_items.jsonl"),
    "prism": Importer("prism-judge", prism, "prism_all_features_mini.jsonl"),
    "usr": Importer("usr", usr, "pc_usr_data.json", json_file=True),
    "personafeedback": Importer("personafeedback", personafeedback, "data/general/easy.jsonl"),
    "laps": Importer("laps", laps, "movie_dataset_train.json", json_file=True),
    "extraction": Importer("extraction", extraction, "ours.jsonl"),
}


def encode(rel: str, rows: Any) -> bytes:
    """A release file's bytes: a JSON document for ``.json`` files, JSON lines otherwise."""
    if rel.endswith(".json"):
        return json.dumps(rows, indent=1).encode()
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def write_release(root: Path, files: dict[str, Any]) -> Path:
    """Write ``files`` under ``root`` and return ``root``."""
    for rel, rows in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode(rel, rows))
    return root


# Each release format's loader, by importer name (the fuzz and malformed-input tests).
LOADERS: dict[str, Callable[[Path], Any]] = {
    "recenter": load_recenter, "prism": load_prism, "usr": load_usr, "personafeedback": load_personafeedback,
    "laps": load_laps, "extraction": load_extraction,
}
