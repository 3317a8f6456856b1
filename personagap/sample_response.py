"""A small illustrative dataset in the PRISM personalised-judge release format, for `personagap demo`.

SAMPLE DATA, NOT HUMAN JUDGMENTS. Ten sample users (an occupation and an answer style each) ask
six questions. Every profile, question, answer, preference and judge answer here was written
or generated for this project to show stage 3 end to end offline.
The "judge" answers come from a seeded random process in which the judge given the
profile agrees with the sample "user" more often than the judge without it, prefers the
first answer a little, and sometimes answers unparseably (as real judge files do); the
numbers say nothing about any real model or person.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from personagap.vocabulary import DECISIVE

_OCCUPATIONS = ("a night-shift nurse", "a retired engineer", "a student on a tight budget",
                "a parent of two young children", "a farmer", "a primary-school teacher", "a freelance translator",
                "a bus driver", "a software developer", "a shop owner")
_STYLES = ("prefers short answers", "likes detailed explanations", "prefers practical tips", "values safety")
_PROFILES = [f"The person is {job}. The person {_STYLES[u % len(_STYLES)]}."
             for u, job in enumerate(_OCCUPATIONS)]
"""Ten sample users (>= 5, so every demo figure gets a user-clustered CI)."""
_QUESTIONS = [
    "How can I sleep better?", "What should I cook tonight?", "How do I start saving money?",
    "Is it worth learning a second language?", "How do I stay fit without a gym?", "What is a good weekend plan?",
]
_SHORT = "[sample short answer for sample user {u} to: {q}]"
_LONG = ("[sample long answer for sample user {u} to: {q}] It covers several options in detail, with steps, "
         "caveats and examples.")
_CONVERSATION_TYPES = ("unguided", "values guided", "controversy guided")
_JUDGES = {
    # file name -> (chance to agree with the sample user, chance of an unparseable answer)
    "prism_all_features_sample-judge.jsonl": (0.8, 0.05),
    "prism_no_persona_sample-judge.jsonl": (0.55, 0.08),
}


def write_sample_prism(dest: str | Path, seed: int = 11) -> Path:
    """Write two sample judge files (with and without profile) under ``dest`` and return the folder.

    Args:
        dest: Folder to create; existing sample files are overwritten.
        seed: Seed of the generator.
    """
    rng = random.Random(seed)
    root = Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.txt").write_text(
        "SAMPLE DATA written for PersonaGap's demo. Not human judgments, not model outputs.\n", encoding="utf-8")
    pairs = []
    for u, profile in enumerate(_PROFILES):
        for k, question in enumerate(_QUESTIONS):
            short, long = _SHORT.format(u=u + 1, q=question), _LONG.format(u=u + 1, q=question)
            a, b = (short, long) if rng.random() < 0.5 else (long, short)
            # Sample "users" who like short answers pick the short one, the others the long one, some ties.
            wants_short = "short" in profile or "practical" in profile
            preferred = "A" if (a == short) == wants_short else "B"
            truth = "C" if rng.random() < 0.1 else preferred
            pairs.append({"user_info": profile, "question": question, "asst_A": a, "asst_B": b,
                          "ground_truth": truth, "conversation_type": _CONVERSATION_TYPES[(u + k) % 3]})
    for name, (agree, broken) in _JUDGES.items():
        lines = []
        for pair in pairs:
            roll = rng.random()
            if roll < broken:
                answer = rng.choice(["[", "N", "T"])
            elif pair["ground_truth"] in DECISIVE and rng.random() < agree:
                answer = pair["ground_truth"]
            else:
                answer = "A" if rng.random() < 0.6 else "B"  # a mild first-position preference
            lines.append(json.dumps(pair | {
                "prompt": "[sample prompt]", "answer": answer, "certainty": str(rng.randint(40, 90)),
                "acc": answer == pair["ground_truth"]}, ensure_ascii=False))
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root
