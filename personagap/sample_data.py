"""A small illustrative dataset in the Re-Centering release format, for `personagap demo`.

SAMPLE DATA, NOT HUMAN JUDGMENTS. Every user, prompt, attribute and label here was
written or generated for this project to show the pipeline end to end offline.
The labels are drawn from a seeded random process in which the "LLM" raters
over-select attributes, so the demo's report has the shape of a real one; its
numbers say nothing about any real model or person.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

_PROFILES = {
    "sample-user-01": ["works night shifts as a nurse", "is vegetarian", "has two young children",
                       "lives in a small apartment", "is learning Spanish", "enjoys hiking on weekends"],
    "sample-user-02": ["is a first-year computer science student", "plays the guitar", "has a tight budget",
                       "prefers concise answers", "lives in Canada", "is training for a marathon"],
    "sample-user-03": ["runs a small bakery", "is allergic to nuts", "writes fantasy stories",
                       "cares for an elderly parent", "uses a Mac", "follows football closely"],
    "sample-user-04": ["is a high-school chemistry teacher", "has a dog", "is saving for a house",
                       "prefers step-by-step instructions", "is lactose intolerant", "plays chess online"],
}
_PROMPTS = {
    "sample-user-01": ["What should I cook for dinner tonight?", "How can I sleep better?"],
    "sample-user-02": ["How do I learn recursion?", "Plan a cheap weekend trip for me."],
    "sample-user-03": ["Suggest a cake recipe for a birthday.", "How do I outline a novel?"],
    "sample-user-04": ["Explain oxidation simply.", "What snacks can I bring to a picnic?"],
}
# Which attributes (by index) the sample "humans" consider relevant to each prompt.
_HUMAN_RELEVANT = {
    ("sample-user-01", 0): {1, 2}, ("sample-user-01", 1): {0},
    ("sample-user-02", 0): {0}, ("sample-user-02", 1): {2, 4},
    ("sample-user-03", 0): {1}, ("sample-user-03", 1): {2},
    ("sample-user-04", 0): {0, 3}, ("sample-user-04", 1): {4},
}
_LLMS = {"sample-llm-eager": 0.45, "sample-llm-careful": 0.15}  # chance of selecting an irrelevant attribute
_ANNOTATORS = {"sample_annotator_a": 0.05, "sample_annotator_b": 0.12, "sample_annotator_c": 0.2}


def _text(attr: str) -> str:
    return f"The user {attr}."


def write_sample_release(dest: str | Path, seed: int = 7) -> Path:
    """Write the sample release under ``dest`` (layout of ``shared/data/recenter``) and return it.

    Args:
        dest: Folder to create; existing sample files are overwritten.
        seed: Seed of the label generator.
    """
    rng = random.Random(seed)
    root = Path(dest)
    for sub in ("stage2/llm_relevance", "pilot/annotations", "pilot/llm_relevance"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "README.txt").write_text(
        "SAMPLE DATA written for PersonaGap's demo. Not human judgments, not model outputs.\n", encoding="utf-8")

    task5: list[dict[str, object]] = []
    task6: list[dict[str, object]] = []
    llm_rows: dict[str, list[dict[str, object]]] = {name: [] for name in _LLMS}
    for user, attrs in _PROFILES.items():
        profile = [{"attribute": _text(a), "reason": "sample reason", "confidence": 0.8} for a in attrs]
        for p, prompt in enumerate(_PROMPTS[user]):
            relevant = _HUMAN_RELEVANT[(user, p)]
            task5.append({"user_id": user, "prompt_index": p, "prompt_text": prompt, "profile_attributes": profile,
                          "items": [], "item_index": len(task5)})
            task6.append({
                "model_tag": "sample-writer", "user_id": user, "prompt_id": f"{user}_{p}", "prompt_text": prompt,
                "attributes": [{"attribute": _text(a), "is_relevant": i in relevant} for i, a in enumerate(attrs)],
                "response_no_context": f"[sample generic answer to: {prompt}]",
                "response_personalized": f"[sample personalised answer to: {prompt}]", "item_index": len(task6),
            })
            for name, eagerness in _LLMS.items():
                items = []
                for i, a in enumerate(attrs):
                    says_yes = (rng.random() < 0.9) if i in relevant else (rng.random() < eagerness)
                    answer = "YES" if says_yes else "NO"
                    items.append({"attribute": _text(a), "relevant": says_yes, "raw_answer": answer,
                                  "full_output": answer + " (sample output)"})
                llm_rows[name].append({"model": name, "sample_index": len(llm_rows[name]), "prompt_index": p,
                                       "user_id": user, "items": items})
    _dump(root / "stage2/task5_items.jsonl", task5)
    _dump(root / "stage2/task6_items.jsonl", task6)
    for name, rows in llm_rows.items():
        _dump(root / f"stage2/llm_relevance/{name}.jsonl", rows)

    # Pilot: the same pairs, labelled by three sample annotators and the two sample LLMs.
    clf: list[dict[str, object]] = []
    annotations: dict[str, list[dict[str, object]]] = {a: [] for a in _ANNOTATORS}
    for sample, row in enumerate(task5):
        user, prompt_index = str(row["user_id"]), row["prompt_index"]
        assert isinstance(prompt_index, int)  # task5 rows are written above with an int prompt_index
        p = prompt_index
        votes_by_attr: dict[int, list[bool]] = {}
        for name, noise in _ANNOTATORS.items():
            judgments = []
            for i, a in enumerate(_PROFILES[user]):
                truth = i in _HUMAN_RELEVANT[(user, p)]
                vote = truth if rng.random() > noise else not truth
                votes_by_attr.setdefault(i, []).append(vote)
                judgments.append({"attribute": _text(a), "relevant": vote})
            annotations[name].append({"task": "3", "index": sample, "user_id": user, "prompt_index": p,
                                      "relevance_judgments": judgments, "note": "", "flagged": False,
                                      "annotator": name, "timestamp": "2026-01-01T00:00:00"})
        for i, a in enumerate(_PROFILES[user]):
            votes = votes_by_attr[i]
            clf.append({"prompt_index": p, "sample_index": sample, "attribute": _text(a),
                        "prompt_text": row["prompt_text"], "label": int(sum(votes) * 2 > len(votes)),
                        "split": "train", "n_annotators": len(votes), "human_yes_rate": sum(votes) / len(votes)})
    _dump(root / "pilot/task3_relevance_clf.jsonl", clf)
    for name, rows in annotations.items():
        _dump(root / f"pilot/annotations/{name}_task3.jsonl", rows)
    for name, rows in llm_rows.items():
        _dump(root / f"pilot/llm_relevance/{name}.jsonl", rows)
    return root


def _dump(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
