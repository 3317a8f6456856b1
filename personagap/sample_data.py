"""A small illustrative dataset in the Re-Centering release format, for `personagap demo`.

SAMPLE DATA, NOT HUMAN JUDGMENTS. Every user, prompt, attribute and label here was
written or generated for this project to show the pipeline end to end offline.
Ten sample users each get six attributes and two prompts drawn (seeded) from the pools
below. Whether an attribute matters to a prompt follows from topic tags: an attribute
sharing a *core* topic with the prompt is relevant, one sharing only a *related* topic is
borderline (the sample humans rarely pick it, the sample "LLMs" often do), the rest are
unrelated. The labels are drawn from that with seeded noise, so the demo's report has
the shape of a real one (the LLMs over-select); its numbers say nothing about any real
model or person.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

N_USERS = 10
"""Sample users (>= 5, so every demo figure gets a user-clustered CI)."""
ATTRIBUTES_PER_USER = 6
PROMPTS_PER_USER = 2

# (attribute, its topics). Invented for the demo.
_ATTRIBUTES: tuple[tuple[str, frozenset[str]], ...] = tuple((a, frozenset(t.split())) for a, t in (
    ("works night shifts as a nurse", "sleep schedule health"),
    ("is vegetarian", "food"),
    ("has two young children", "family food schedule"),
    ("lives in a small apartment", "home"),
    ("is learning Spanish", "language travel"),
    ("enjoys hiking on weekends", "fitness outdoors travel"),
    ("is a first-year computer science student", "code study money"),
    ("plays the guitar", "music"),
    ("has a tight budget", "money"),
    ("prefers concise answers", "style"),
    ("lives in Canada", "travel weather"),
    ("is training for a marathon", "fitness food sleep"),
    ("runs a small bakery", "food business"),
    ("is allergic to nuts", "food health"),
    ("writes fantasy stories", "writing"),
    ("cares for an elderly parent", "family schedule health"),
    ("uses a Mac", "code tech"),
    ("follows football closely", "sport"),
    ("is a high-school chemistry teacher", "science study"),
    ("has a dog", "home outdoors"),
    ("is saving for a house", "money home"),
    ("prefers step-by-step instructions", "style study"),
    ("is lactose intolerant", "food health"),
    ("plays chess online", "games"),
    ("has a bad knee", "fitness health"),
    ("commutes two hours a day by train", "schedule travel"),
    ("is colour-blind", "tech design"),
    ("keeps a vegetable garden", "food outdoors home"),
))
# (prompt, core topics, related topics). Invented for the demo.
_PROMPTS: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = tuple(
    (p, frozenset(core.split()), frozenset(related.split())) for p, core, related in (
        ("What should I cook for dinner tonight?", "food", "family schedule money"),
        ("How can I sleep better?", "sleep", "health schedule home"),
        ("How do I learn recursion?", "code", "study style"),
        ("Plan a cheap weekend trip for me.", "travel money", "outdoors family"),
        ("Suggest a cake recipe for a birthday.", "food", "family business"),
        ("How do I outline a novel?", "writing", "style study"),
        ("Explain oxidation simply.", "science style", "study"),
        ("What snacks can I bring to a picnic?", "food", "outdoors family"),
        ("How can I stay fit at home?", "fitness home", "health schedule"),
        ("Which laptop should I buy for school?", "tech money", "code study"),
        ("How do I fit exercise into a busy week?", "fitness schedule", "family health"),
        ("What is a good present for my neighbour?", "money", "home food"),
        ("How do I keep a houseplant alive?", "home", "outdoors"),
        ("Recommend a hobby I could start this winter.", "music games writing", "weather money"),
    ))
_LLMS = {
    # name -> chance of YES for (relevant, borderline, unrelated) attributes
    "sample-llm-eager": (0.93, 0.85, 0.3),
    "sample-llm-careful": (0.85, 0.4, 0.06),
}
_ANNOTATORS = {
    # name -> chance of YES for (relevant, borderline, unrelated) attributes (blind sample "humans")
    "sample_annotator_a": (0.93, 0.15, 0.02),
    "sample_annotator_b": (0.88, 0.25, 0.04),
    "sample_annotator_c": (0.85, 0.3, 0.06),
}
_RELEVANT, _BORDERLINE, _UNRELATED = 0, 1, 2
_PIPELINE = (0.9, 0.6, 0.15)
"""The sample pipeline's chance of selecting a (relevant, borderline, unrelated) attribute."""
WRITER = "sample-writer"
"""The sample model that wrote every sample answer."""


def _text(attr: str) -> str:
    return f"The user {attr}."


ATTRIBUTE_TEXTS: tuple[str, ...] = tuple(_text(a) for a, _ in _ATTRIBUTES)
"""The sample attribute sentences (also the linked sample pipeline's, :mod:`personagap.sample_pipeline`)."""
PROMPT_TEXTS: tuple[str, ...] = tuple(p for p, _, _ in _PROMPTS)
"""The sample prompts."""


def _relation(topics: frozenset[str], prompt: tuple[str, frozenset[str], frozenset[str]]) -> int:
    _, core, related = prompt
    return _RELEVANT if topics & core else _BORDERLINE if topics & related else _UNRELATED


def sample_users(seed: int = 7) -> list[tuple[str, list[tuple[str, frozenset[str]]], list[int]]]:
    """The sample users: ``(user_id, attributes with topics, indices into the prompt pool)``, seeded.

    Each user's prompts are ones at least one of their attributes is relevant to, so no prompt has an
    empty human reference.
    """
    rng = random.Random(seed)
    users = []
    for u in range(1, N_USERS + 1):
        while True:
            attrs = rng.sample(_ATTRIBUTES, ATTRIBUTES_PER_USER)
            fits = [p for p, prompt in enumerate(_PROMPTS)
                    if 1 <= sum(_relation(t, prompt) == _RELEVANT for _, t in attrs) <= 3]
            if len(fits) >= PROMPTS_PER_USER:
                break
        users.append((f"sample-user-{u:02d}", attrs, rng.sample(fits, PROMPTS_PER_USER)))
    return users


def write_sample_release(dest: str | Path, seed: int = 7) -> Path:
    """Write the sample release under ``dest`` (layout of ``shared/data/recenter``) and return it.

    Args:
        dest: Folder to create; existing sample files are overwritten.
        seed: Seed of the users and the label generator.
    """
    rng = random.Random(seed)
    pick = random.Random(seed + 1)
    root = Path(dest)
    for sub in ("stage2/llm_relevance", "stage3_responses", "pilot/annotations", "pilot/llm_relevance"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "README.txt").write_text(
        "SAMPLE DATA written for PersonaGap's demo. Not human judgments, not model outputs.\n", encoding="utf-8")

    task5: list[dict[str, object]] = []
    task6: list[dict[str, object]] = []
    relations: list[list[int]] = []  # per task5 row, each attribute's relation to the prompt
    llm_rows: dict[str, list[dict[str, object]]] = {name: [] for name in _LLMS}
    for user, attrs, prompt_ids in sample_users(seed):
        profile = [{"attribute": _text(a), "reason": "sample reason", "confidence": 0.8} for a, _ in attrs]
        for p, pool_index in enumerate(prompt_ids):
            prompt = _PROMPTS[pool_index]
            relation = [_relation(topics, prompt) for _, topics in attrs]
            relations.append(relation)
            # The sample pipeline's own selection (task5 items): like the sample LLMs, it over-selects borderline
            # attributes. Drawn from its own stream, so the rest of the sample is what it always was.
            chosen = [{"attribute": _text(a), "relevance": 0.9 if r == _RELEVANT else 0.5,
                       "expected_behavior": "[sample expected behaviour]"}
                      for (a, _), r in zip(attrs, relation, strict=True) if pick.random() < _PIPELINE[r]]
            task5.append({"user_id": user, "prompt_index": p, "prompt_text": prompt[0], "profile_attributes": profile,
                          "items": chosen, "item_index": len(task5)})
            task6.append({
                "model_tag": WRITER, "user_id": user, "prompt_id": f"{user}_{p}", "prompt_text": prompt[0],
                "attributes": [{"attribute": _text(a), "is_relevant": r == _RELEVANT}
                               for (a, _), r in zip(attrs, relation, strict=True)],
                "response_no_context": f"[sample generic answer to: {prompt[0]}]",
                "response_personalized": f"[sample personalised answer to: {prompt[0]}]", "item_index": len(task6),
            })
            for name, chances in _LLMS.items():
                items = []
                for (a, _), r in zip(attrs, relation, strict=True):
                    says_yes = rng.random() < chances[r]
                    answer = "YES" if says_yes else "NO"
                    items.append({"attribute": _text(a), "relevant": says_yes, "raw_answer": answer,
                                  "full_output": answer + " (sample output)"})
                llm_rows[name].append({"model": name, "sample_index": len(llm_rows[name]), "prompt_index": p,
                                       "user_id": user, "items": items})
    _dump(root / "stage2/task5_items.jsonl", task5)
    _dump(root / "stage2/task6_items.jsonl", task6)
    _write_stage3(root, task5, task6)
    for name, rows in llm_rows.items():
        _dump(root / f"stage2/llm_relevance/{name}.jsonl", rows)

    # Pilot: the same pairs, labelled blind by three sample annotators, and the two sample LLMs' labels.
    clf: list[dict[str, object]] = []
    annotations: dict[str, list[dict[str, object]]] = {a: [] for a in _ANNOTATORS}
    for sample, (row, relation) in enumerate(zip(task5, relations, strict=True)):
        profile_attributes = row["profile_attributes"]
        assert isinstance(profile_attributes, list)  # written above as a list of dicts
        texts = [str(a["attribute"]) for a in profile_attributes]
        votes_by_attr: list[list[bool]] = [[] for _ in texts]
        for name, chances in _ANNOTATORS.items():
            judgments = []
            for i, (text, r) in enumerate(zip(texts, relation, strict=True)):
                vote = rng.random() < chances[r]
                votes_by_attr[i].append(vote)
                judgments.append({"attribute": text, "relevant": vote})
            annotations[name].append({"task": "3", "index": sample, "user_id": row["user_id"],
                                      "prompt_index": row["prompt_index"], "relevance_judgments": judgments,
                                      "note": "", "flagged": False, "annotator": name,
                                      "timestamp": "2026-01-01T00:00:00"})
        for text, votes in zip(texts, votes_by_attr, strict=True):
            clf.append({"prompt_index": row["prompt_index"], "sample_index": sample, "attribute": text,
                        "prompt_text": row["prompt_text"], "label": int(sum(votes) * 2 > len(votes)),
                        "split": "train", "n_annotators": len(votes), "human_yes_rate": sum(votes) / len(votes)})
    _dump(root / "pilot/task3_relevance_clf.jsonl", clf)
    for name, rows in annotations.items():
        _dump(root / f"pilot/annotations/{name}_task3.jsonl", rows)
    for name, rows in llm_rows.items():
        _dump(root / f"pilot/llm_relevance/{name}.jsonl", rows)
    return root


def _write_stage3(root: Path, task5: list[dict[str, object]], task6: list[dict[str, object]]) -> None:
    """The sample writer's answers under the three input conditions (layout of ``stage3_responses/``)."""
    answers = {"attributes": "[sample answer written from the pipeline's selection to: {}]",
               "gt_attributes": None, "no_context": None}
    for mode, template in answers.items():
        rows = []
        for row5, row6 in zip(task5, task6, strict=True):
            # The human-selected and generic answers are task6's, as in the release.
            text = (template.format(row5["prompt_text"]) if template is not None else
                    row6["response_personalized" if mode == "gt_attributes" else "response_no_context"])
            rows.append({"user_id": row5["user_id"], "prompt_id": row6["prompt_id"],
                         "prompt_text": row5["prompt_text"], "profile_attributes": row5["profile_attributes"],
                         "items": row5["items"], "mode": mode, "model": WRITER, "response": text})
        _dump(root / f"stage3_responses/eval_results_task5_{mode}_{WRITER}.jsonl", rows)


def _dump(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
