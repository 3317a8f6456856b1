"""A made-up relevance dataset for the routing tests (written for PersonaGap's tests, not human judgments).

Items come from the routing harness's generator (:class:`benchmarks.calibration_routing.RoutingWorld`): each has the
judge's yes/no with a certainty on 1-100 and, for some, one person's blind label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.calibration_routing import RoutingWorld
from personagap.labels_api import import_labels

DATASET = "route-team"
JUDGE = "team-llm"
CHEAP = "cheap-llm"
"""A second judge (for ``--cascade``), made up for the tests: certain (90) on a random half of the items and then
right wherever a person labelled them, unsure (50) on the others with the first judge's label flipped on 30%."""
HUMAN = "ann"


def label_rows(items: pd.DataFrame) -> list[dict[str, Any]]:
    """The generic format's rows of ``items``: the judge's label with its confidence, and the person's if any."""
    rows: list[dict[str, Any]] = []
    for it in items.itertuples(index=False):
        rows.append({"item_id": it.item_id, "user_id": it.user_id, "rater": JUDGE, "rater_kind": "llm",
                     "label": it.label, "confidence": float(it.confidence), "confidence_scale": "1-100",
                     "prompt": f"Prompt of {it.item_id}", "attribute": f"Attribute of {it.item_id}"})
        if pd.notna(it.human):
            rows.append({"item_id": it.item_id, "user_id": it.user_id, "rater": HUMAN, "rater_kind": "human",
                         "label": it.human})
    return rows


def cheap_items(items: pd.DataFrame, seed: int = 9) -> pd.DataFrame:
    """The :data:`CHEAP` judge's labels and certainties on the same items (human labels unchanged)."""
    rng = np.random.default_rng(seed)
    sure = rng.random(len(items)) < 0.5
    flipped = np.where(items["label"] == "yes", "no", "yes")
    unsure = np.where(rng.random(len(items)) < 0.3, flipped, items["label"])
    label = np.where(sure, items["human"].where(items["human"].notna(), items["label"]), unsure)
    return items.assign(label=label, confidence=np.where(sure, 90.0, 50.0))


def route_db(path: Path, *, users: int = 24, human_share: float = 0.6, seed: int = 4,
             cheap: bool = False) -> tuple[Path, pd.DataFrame]:
    """A store holding one relevance dataset of ``users`` users; returns it and the items as generated.

    With ``cheap`` the :data:`CHEAP` judge's labels (:func:`cheap_items`) are stored too.
    """
    items = RoutingWorld(human_share=human_share).study(users, np.random.default_rng(seed))
    rows = label_rows(items)
    if cheap:
        rows += [dict(r, rater=CHEAP) for r in label_rows(cheap_items(items)) if r["rater"] == JUDGE]
    import_labels(pd.DataFrame(rows), stage="relevance", dataset=DATASET, db=path, categories=["no", "yes"])
    return path, items


def routed_store(path: Path) -> tuple[Path, list[str]]:
    """A routed store (target accuracy 0.9 splits the items) and the routed item ids.

    The split method: 12 users are too few for the guaranteed threshold to keep anything at 0.9, and the queue,
    not the threshold, is under test here.
    """
    from personagap.commands.route import route
    from personagap.dashboard import annotate

    db, _ = route_db(path, users=12)
    route(str(db), "relevance", DATASET, JUDGE, target_accuracy=0.9, method="split")
    routed = annotate.routed_items(db, "relevance", DATASET)
    assert routed  # the test needs some routed items
    return db, routed
