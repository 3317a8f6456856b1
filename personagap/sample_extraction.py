"""SAMPLE stage-1 data for `personagap demo`: invented for this project, NOT human judgments.

Two files are written: a LAPS-format folder (dialogues with stated preferences) and an extraction
JSONL (a made-up extractor's attributes with made-up verdicts by two sample "annotators" and a
sample verifier, plus gold preferences). They exercise every part of the stage-1 report offline.

The JSONL is generated (seeded) from the fact pool below: each sample user states five facts in a
short cooking conversation; the sample extractor restates most of them faithfully, misses some and
over-generalises some ("allergic to peanuts" -> "allergic to all nuts"). The sample annotators call
faithful attributes ok and over-generalised ones bad, with some noise and some "unsure"; the sample
verifier is lenient and accepts many over-generalisations, so the report shows a verifier that is
more accepting than the humans. Its numbers say nothing about any real model or person.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from personagap.analysis.agreement import MIN_USERS_FOR_CI
from personagap.vocabulary import VERIFICATION_LABELS

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

FACTS_PER_USER = 5
EXTRACTOR = "sample-extractor"
VERIFIER = "sample-verifier"

# category -> [(gold value, what the user says, faithful attribute, over-generalised attribute)]. Invented.
_Fact = tuple[str, str, str, str]
_FACTS: dict[str, list[_Fact]] = {
    "diet_requirements": [
        ("vegetarian", "I've been vegetarian for years.", "The user is vegetarian.",
         "The user avoids all animal products."),
        ("gluten free", "I have to eat gluten free.", "The user eats gluten free.", "The user has coeliac disease."),
        ("pescatarian", "I eat fish but no meat.", "The user is pescatarian (fish, no meat).",
         "The user eats fish every day."),
    ],
    "allergies": [
        ("peanuts", "I can't eat peanuts.", "The user is allergic to peanuts.", "The user is allergic to all nuts."),
        ("shellfish", "Shellfish makes me ill.", "The user is allergic to shellfish.", "The user avoids all seafood."),
        ("sesame", "I react badly to sesame.", "The user is allergic to sesame.", "The user avoids all seeds."),
    ],
    "time_availability": [
        ("30 minutes", "I usually have 30 minutes at most.", "The user has 30 minutes at most to cook.",
         "The user never cooks elaborate meals."),
        ("weekends", "I only really cook at weekends.", "The user cooks mainly at weekends.",
         "The user eats takeaway every weekday."),
        ("quick", "It has to be quick, I'm always rushing.", "The user wants quick recipes.",
         "The user skips breakfast."),
    ],
    "companions": [
        ("partner", "I cook for my partner most nights.", "The user cooks for their partner.",
         "The user lives with a partner and is an experienced cook."),
        ("kids", "My two kids eat with me.", "The user cooks for their kids.", "The user is a single parent."),
        ("roommates", "I share dinners with my roommates.", "The user shares dinners with roommates.",
         "The user is a university student."),
    ],
    "cuisine_like": [
        ("Thai", "I love Thai food.", "The user likes Thai cuisine.", "The user likes all Asian cuisines."),
        ("Mexican", "Mexican is my favourite.", "The user likes Mexican cuisine.", "The user loves very hot chillies."),
        ("Italian", "Italian dishes always win at home.", "The user likes Italian cuisine.",
         "The user eats pasta every day."),
    ],
    "dish_like": [
        ("soup", "A warm soup would be perfect.", "The user would like a soup.", "The user only eats light meals."),
        ("curry", "I'm craving a curry.", "The user wants a curry.", "The user likes very spicy food."),
        ("salad", "Maybe a big salad.", "The user would like a salad.", "The user is on a diet."),
    ],
    "health_goals": [
        ("high protein", "I need lots of protein.", "The user wants high protein meals.",
         "The user is a bodybuilder."),
        ("low sugar", "I'm cutting down on sugar.", "The user wants low sugar meals.", "The user has diabetes."),
        ("less salt", "My doctor told me to eat less salt.", "The user should eat less salt.",
         "The user has heart disease."),
    ],
    "ingredient_dislike": [
        ("mushrooms", "I hate mushrooms.", "The user dislikes mushrooms.", "The user dislikes all vegetables."),
        ("cilantro", "Cilantro tastes like soap to me.", "The user dislikes cilantro.",
         "The user dislikes all fresh herbs."),
        ("olives", "No olives, please.", "The user dislikes olives.", "The user dislikes Mediterranean food."),
    ],
    "occasion_or_theme": [
        ("birthday", "It's my daughter's birthday.", "The user is cooking for a birthday.",
         "The user has several children."),
        ("dinner party", "I'm hosting a dinner party for six.", "The user is hosting a dinner party.",
         "The user often hosts large parties."),
        ("picnic", "It's for a picnic on Sunday.", "The user is preparing a picnic.", "The user loves the outdoors."),
    ],
    "skill_level": [
        ("beginner", "I'm not a great cook.", "The user is a beginner cook.", "The user cannot use an oven."),
        ("confident", "I'm fairly confident in the kitchen.", "The user is a confident cook.",
         "The user is a professional chef."),
        ("beginner", "I've only just started cooking.", "The user is a beginner cook.",
         "The user has never used a knife."),
    ],
}
N_USERS = -(-MIN_USERS_FOR_CI * len(_FACTS) // FACTS_PER_USER)
"""Sample users: each gold category is stated by MIN_USERS_FOR_CI of them, so every per-category row gets a CI."""
_ASSISTANT = ("Good to know. Anything else I should keep in mind?", "Thanks. Anything else about you or the meal?")
_EXTRACT = {"faithful": 0.85, "over": 0.35}
"""Chance the sample extractor writes each fact's faithful / over-generalised attribute."""
_VERDICTS: dict[str, dict[str, tuple[float, float, float]]] = {
    # rater -> attribute type -> chances of (ok, bad, unsure)
    "sample_annotator_A": {"faithful": (0.94, 0.03, 0.03), "over": (0.06, 0.88, 0.06)},
    "sample_annotator_B": {"faithful": (0.9, 0.04, 0.06), "over": (0.08, 0.82, 0.1)},
    VERIFIER: {"faithful": (0.95, 0.02, 0.03), "over": (0.7, 0.22, 0.08)},
}


def _verdict(rng: random.Random, chances: tuple[float, float, float]) -> str:
    return rng.choices(VERIFICATION_LABELS, weights=chances)[0]


def sample_extraction_rows(seed: int = 0) -> list[dict[str, Any]]:
    """The SAMPLE extraction JSONL rows (format of :mod:`personagap.human_data.extraction`), seeded.

    Every gold category is stated by the same number of users (the least-used categories go first), so each
    per-category row of the report has enough users for a CI.
    """
    rng = random.Random(seed)
    used = dict.fromkeys(_FACTS, 0)
    rows = []
    for u in range(1, N_USERS + 1):
        categories = sorted(_FACTS, key=lambda c: (used[c], rng.random()))[:FACTS_PER_USER]
        rng.shuffle(categories)
        facts = [rng.choice(_FACTS[c]) for c in categories]
        for c in categories:
            used[c] += 1
        conversation: list[dict[str, str]] = []
        turn_of: list[str] = []
        for start in range(0, len(facts), 2):
            if conversation:
                conversation.append({"turn_id": str(len(conversation) + 1), "role": "assistant",
                                     "text": _ASSISTANT[(start // 2 - 1) % len(_ASSISTANT)]})
            said = [f[1] for f in facts[start:start + 2]]
            opening = ["I'm looking for something to cook."] if not conversation else []
            conversation.append({"turn_id": str(len(conversation) + 1), "role": "user",
                                 "text": " ".join(opening + said)})
            turn_of += [conversation[-1]["turn_id"]] * len(said)
        attributes = []
        for (_, _, faithful, over), turn in zip(facts, turn_of, strict=True):
            for kind, text in (("faithful", faithful), ("over", over)):
                if rng.random() >= _EXTRACT[kind]:
                    continue
                low, high = (0.7, 0.97) if kind == "faithful" else (0.3, 0.7)
                attributes.append({
                    "attribute": text, "turn_ids": [turn], "confidence": round(rng.uniform(low, high), 2),
                    "verdicts": [{"rater": rater, "label": _verdict(rng, chances[kind]),
                                  **({"kind": "llm"} if rater == VERIFIER else {})}
                                 for rater, chances in _VERDICTS.items()]})
        rows.append({
            "dataset": "sample-extraction", "user_id": f"sample-user-{u}", "extractor": EXTRACTOR,
            "conversation": conversation,
            "gold": [{"category": c, "value": f[0]} for c, f in zip(categories, facts, strict=True)],
            "attributes": attributes,
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
