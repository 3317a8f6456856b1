"""SAMPLE stage-1 data for `personagap demo`: invented for this project, NOT human judgments.

Two files are written: a LAPS-format folder (dialogues with stated preferences) and an extraction
JSONL (a made-up extractor's attributes with made-up verdicts by two sample "annotators" and a
sample verifier, plus gold preferences). They exercise every part of the stage-1 report offline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_LAPS = [
    {"worker_id": "sample-worker-1", "topic": "movie", "sessions": [{
        "dialogue": [
            {"role": "Assistant", "turn_number": 0, "message": "Hi! What would you like to watch tonight?"},
            {"role": "User", "turn_number": 1, "message": "Something funny with my two kids, they are 8 and 10."},
            {"role": "Assistant", "turn_number": 2, "message": "Any genres you avoid?"},
            {"role": "User", "turn_number": 3, "message": "No horror please, and nothing too long."},
        ],
        "preferences": {"genre_preferences_like": ["comedy"], "viewing_companions": ["kids"],
                        "genre_preferences_dislike": ["horror"]},
        "task_setting": "family evening (SAMPLE)"}]},
    {"worker_id": "sample-worker-2", "topic": "movie", "sessions": [{
        "dialogue": [
            {"role": "Assistant", "turn_number": 0, "message": "Hello! Tell me what you enjoy."},
            {"role": "User", "turn_number": 1, "message": "I love old science fiction films, especially from the 80s."},
        ],
        "preferences": {"genre_preferences_like": ["science fiction"], "release_period_preferences": ["1980s"]},
        "task_setting": "weekend (SAMPLE)"}]},
]

# (user, conversation, gold, [(attribute, turn ids, confidence, annotator_a, annotator_b, verifier)])
_Attr = tuple[str, list[str], float, str, str, str]
_USERS: list[tuple[str, list[tuple[str, str]], list[tuple[str, str]], list[_Attr]]] = [
    ("sample-user-1",
     [("user", "I'm vegetarian and I cook for my partner most nights."), ("assistant", "Nice! Any allergies?"),
      ("user", "I can't eat peanuts. I usually have 30 minutes at most.")],
     [("diet_requirements", "vegetarian"), ("allergies", "peanuts"), ("time_availability", "30 minutes"),
      ("companions", "partner")],
     [("The user is vegetarian.", ["1"], 0.95, "ok", "ok", "ok"),
      ("The user is allergic to peanuts.", ["3"], 0.9, "ok", "ok", "ok"),
      ("The user has little time to cook (30 minutes at most).", ["3"], 0.8, "ok", "ok", "ok"),
      ("The user dislikes all nuts.", ["3"], 0.6, "bad", "bad", "ok"),
      ("The user lives with a partner and is an experienced cook.", ["1"], 0.5, "bad", "unsure", "bad")]),
    ("sample-user-2",
     [("user", "Looking for a spicy Thai curry for a dinner party."), ("assistant", "How many guests?"),
      ("user", "Six friends, one of them is gluten free.")],
     [("cuisine_like", "Thai"), ("dish_like", "spicy curry"), ("companions", "friends"),
      ("diet_requirements", "gluten free")],
     [("The user likes Thai cuisine.", ["1"], 0.9, "ok", "ok", "ok"),
      ("The user likes spicy food.", ["1"], 0.8, "ok", "ok", "ok"),
      ("The user is gluten intolerant.", ["3"], 0.7, "bad", "bad", "ok"),
      ("The user often hosts large parties.", ["1", "3"], 0.4, "bad", "bad", "unsure")]),
    ("sample-user-3",
     [("user", "I want a quick breakfast with lots of protein."), ("assistant", "Do you eat eggs?"),
      ("user", "Yes, eggs are fine, but I hate mushrooms.")],
     [("dish_like", "breakfast"), ("health_goals", "high protein"), ("ingredient_dislike", "mushrooms"),
      ("time_availability", "quick")],
     [("The user wants high protein meals.", ["1"], 0.9, "ok", "ok", "ok"),
      ("The user dislikes mushrooms.", ["3"], 0.95, "ok", "ok", "ok"),
      ("The user eats eggs.", ["3"], 0.7, "ok", "unsure", "ok"),
      ("The user is a bodybuilder.", ["1"], 0.3, "bad", "bad", "bad")]),
    ("sample-user-4",
     [("user", "Any easy cake recipe? It's my daughter's birthday."), ("assistant", "What flavour?"),
      ("user", "Chocolate, she loves it. I'm not a great baker.")],
     [("occasion_or_theme", "birthday"), ("dish_like", "chocolate cake"), ("skill_level", "beginner baker"),
      ("companions", "daughter")],
     [("The user is baking for their daughter's birthday.", ["1"], 0.9, "ok", "ok", "ok"),
      ("The user's daughter loves chocolate.", ["3"], 0.9, "ok", "ok", "ok"),
      ("The user is a beginner baker.", ["3"], 0.7, "ok", "unsure", "ok"),
      ("The user has several children.", ["1"], 0.4, "bad", "bad", "ok")]),
]


def sample_extraction_rows() -> list[dict[str, Any]]:
    """The SAMPLE extraction JSONL rows (format of :mod:`personagap.human_data.extraction`)."""
    rows = []
    for user, conversation, gold, attrs in _USERS:
        rows.append({
            "dataset": "sample-extraction", "user_id": user, "extractor": "sample-extractor",
            "conversation": [{"turn_id": str(i), "role": role, "text": text}
                             for i, (role, text) in enumerate(conversation, start=1)],
            "gold": [{"category": c, "value": v} for c, v in gold],
            "attributes": [{"attribute": a, "turn_ids": t, "confidence": c, "verdicts": [
                {"rater": "sample_annotator_A", "label": x}, {"rater": "sample_annotator_B", "label": y},
                {"rater": "sample-verifier", "label": z, "kind": "llm"}]} for a, t, c, x, y, z in attrs],
        })
    return rows


def write_sample_extraction(folder: str | Path) -> tuple[Path, Path]:
    """Write the SAMPLE LAPS-format folder and extraction JSONL under ``folder``.

    Returns:
        ``(laps_folder, extraction_jsonl)``.
    """
    folder = Path(folder)
    laps = folder / "laps"
    laps.mkdir(parents=True, exist_ok=True)
    (laps / "movie_dataset_val.json").write_text(json.dumps(_LAPS, indent=1), encoding="utf-8")
    jsonl = folder / "extraction_sample.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in sample_extraction_rows()), encoding="utf-8")
    return laps, jsonl
