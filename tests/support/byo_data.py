"""Small made-up team data in the generic label format (written for PersonaGap's tests, not human judgments).

Every stage gets the same design: users with a few items each, three human annotators and one LLM per
item. A seeded latent truth per item; each human agrees with it most of the time, the LLM somewhat less,
so agreement figures are neither perfect nor chance.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

HUMANS = ("ann-1", "ann-2", "ann-3")
LLM = "team-gpt"
PROMPTS = ("Plan a weekend trip for me.", "Suggest a dinner recipe.", "Help me pick a laptop.",
           "Write a birthday message for my sister.")
ATTRIBUTES = ("The user has a dog.", "The user is vegetarian.", "The user works night shifts.",
              "The user lives in a small flat.", "The user is learning Spanish.")


def _noisy(rng: random.Random, truth: str, choices: tuple[str, ...], p_right: float) -> str:
    return truth if rng.random() < p_right else rng.choice([c for c in choices if c != truth])


def team_rows(stage: str, *, n_users: int = 12, per_user: int = 4, seed: int = 7,
              shape: str = "pairwise") -> list[dict[str, Any]]:
    """Rows of the generic format for ``stage`` (``shape`` picks stage 3's pairwise or single items)."""
    rng = random.Random(f"{stage}/{shape}/{seed}")
    rows: list[dict[str, Any]] = []
    for u in range(n_users):
        user = f"user-{u:02d}"
        profile = "\n".join(rng.sample(ATTRIBUTES, 2))
        for k in range(per_user):
            item = f"{user}/{shape if stage == 'response' else stage}-{k}"
            context: dict[str, Any]
            if stage == "extraction":
                choices: tuple[str, ...] = ("ok", "bad", "unsure")
                context = {"attribute": ATTRIBUTES[(u + k) % len(ATTRIBUTES)],
                           "conversation": [{"role": "user", "text": f"Hi, I am {user}; turn {k}."},
                                            {"role": "assistant", "text": "Hello!"}]}
            elif stage == "relevance":
                choices = ("yes", "no")
                context = {"prompt": PROMPTS[k % len(PROMPTS)], "attribute": ATTRIBUTES[(u * 3 + k) % len(ATTRIBUTES)],
                           "profile": profile}
            elif shape == "pairwise":
                choices = ("A", "B", "tie")
                context = {"prompt": PROMPTS[k % len(PROMPTS)], "profile": profile,
                           "response_a": f"A generic answer {k} for {user}.",
                           "response_b": f"A longer answer {k} that mentions what {user} told us about themselves."}
            else:
                choices = ("yes", "no")
                context = {"prompt": PROMPTS[k % len(PROMPTS)], "profile": profile,
                           "response": f"Since you have a dog, answer {k} for {user}.",
                           "response_kind": "personalised" if k % 2 else "generic"}
            truth = rng.choice(choices)
            for i, rater in enumerate(HUMANS):
                row = {"item_id": item, "user_id": user, "rater": rater, "label": _noisy(rng, truth, choices, 0.8)}
                if i == 0:
                    row |= context  # context given once per item: on its first row
                rows.append(row)
            rows.append({"item_id": item, "user_id": user, "rater": LLM, "rater_kind": "llm",
                         "label": _noisy(rng, truth, choices, 0.7), "reason": "made-up reason"})
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write rows as JSONL, CSV or Parquet by the file's extension."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        frame = pd.DataFrame(rows)
        if "conversation" in frame:
            frame["conversation"] = [json.dumps(c) if isinstance(c, list) else None for c in frame["conversation"]]
        if path.suffix == ".csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
    return path


def expected_vs_majority(rows: list[dict[str, Any]], normalise: Any = str) -> tuple[int, float]:
    """(n, Cohen's kappa) of the LLM against the strict human majority, from the written rows."""
    from sklearn.metrics import cohen_kappa_score

    humans: dict[str, list[str]] = {}
    llm: dict[str, str] = {}
    for r in rows:
        label = normalise(r["label"])
        if r.get("rater_kind") == "llm":
            llm[r["item_id"]] = label
        else:
            humans.setdefault(r["item_id"], []).append(label)
    pairs = []
    for item, votes in humans.items():
        top = Counter(votes).most_common()
        if len(top) == 1 or top[0][1] > top[1][1]:
            pairs.append((top[0][0], llm[item]))
    return len(pairs), float(cohen_kappa_score([p[0] for p in pairs], [p[1] for p in pairs]))
