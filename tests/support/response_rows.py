"""Made-up single-response label rows (three humans, two judges per item) and the strict human majority over them.

Written for PersonaGap's tests, not human judgments; a seeded generator per dataset name.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from personagap.analysis.agreement import MIN_USERS_FOR_CI

HUMANS = ("ann", "bob", "cyd")


JUDGES = ("judge-kind", "judge-strict")


TONE = "Is the tone of this answer right for this user?"


FACTS = "Does this answer get the user's own facts right?"


QUALITY = "How well does this answer suit this user, from 1 (not at all) to 5 (perfectly)?"


def single_rows(name: str, choices: tuple[str, ...], *, n_users: int = MIN_USERS_FOR_CI,
                per_user: int = 5) -> list[dict[str, Any]]:
    """Single-response rows: three humans (mostly agreeing) and two noisier judges per item."""
    rng = random.Random(name)
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        for k in range(per_user):
            item, user = f"{name}/{u}/{k}", f"user-{u}"
            truth = rng.choice(choices)
            for i, rater in enumerate(HUMANS):
                label = truth if rng.random() < 0.8 else rng.choice(choices)
                row = {"item_id": item, "user_id": user, "rater": rater, "label": label}
                if i == 0:
                    row |= {"prompt": f"Question {k} of {user}", "response": f"Answer {k} to {user} ({name})."}
                rows.append(row)
            for j, judge in enumerate(JUDGES):
                label = truth if rng.random() < 0.75 - 0.15 * j else rng.choice(choices)
                rows.append({"item_id": item, "user_id": user, "rater": judge, "rater_kind": "llm", "label": label})
    return rows


def strict_majority(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Item -> its humans' unique most frequent label (items whose humans tie have none)."""
    votes: dict[str, list[str]] = {}
    for r in rows:
        if r["rater"] in HUMANS:
            votes.setdefault(r["item_id"], []).append(str(r["label"]))
    out = {}
    for item, v in votes.items():
        top = Counter(v).most_common()
        if len(top) == 1 or top[0][1] > top[1][1]:
            out[item] = top[0][0]
    return out


def judge_pairs(rows: list[dict[str, Any]], judge: str) -> tuple[list[str], list[str]]:
    ref = strict_majority(rows)
    said = {r["item_id"]: str(r["label"]) for r in rows if r["rater"] == judge}
    items = sorted(set(ref) & set(said))
    return [ref[i] for i in items], [said[i] for i in items]
