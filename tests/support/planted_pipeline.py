"""A linked pipeline dataset with planted failure rates and a planted cascade (made up for PersonaGap's tests).

The generator draws each stage's human verdicts at known rates (``TRUTH`` holds the generating rates); it returns
the items, the labels and the over-personalised answers computed from its own records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.pipe_store import item, label

USERS, ATTRS, PROMPTS = 40, 6, 2


P_BAD = 0.2  # stage 1: humans reject an extracted attribute


P_RELEVANT, SEL_IF_REL, SEL_IF_NOT = 0.3, 0.8, 0.45  # stage 2: human relevance, the pipeline's selection


NO_BETTER = {"pipeline": 0.75, "oracle": 0.3}  # stage 3: humans judge the personalised answer no better


TRUTH = {
    "rejected_attributes": P_BAD,
    "irrelevant_selected": (1 - P_RELEVANT) * SEL_IF_NOT / (P_RELEVANT * SEL_IF_REL + (1 - P_RELEVANT) * SEL_IF_NOT),
    "missed_relevant": 1 - SEL_IF_REL,
    "over_selection": (P_RELEVANT * SEL_IF_REL + (1 - P_RELEVANT) * SEL_IF_NOT) / P_RELEVANT,
}


def planted(seed: int = 7, records: list[tuple[str, bool, bool, bool]] | None = None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], set[str]]:
    """Items, labels and the over-personalised answers; ``records`` gets (user, rejected, relevant, selected) of
    every stage-2 attribute."""
    rng = np.random.default_rng(seed)
    items, labels, flagged = [], [], set()
    records = records if records is not None else []
    for u in range(USERS):
        user = f"u{u:02d}"
        bad = {f"{user}-a{k}": bool(rng.random() < P_BAD) for k in range(ATTRS)}
        for aid, is_bad in bad.items():
            items.append(item(f"s1-{aid}", "plant-s1", "extraction", user, system="extractor-x", attribute_id=aid))
            labels.append(label(f"s1-{aid}", "hm", "human_majority", "bad" if is_bad else "ok"))
        for p in range(PROMPTS):
            relevant, selected = [], []
            for aid in bad:
                rel = bool(rng.random() < P_RELEVANT)
                sel = bool(rng.random() < (SEL_IF_REL if rel else SEL_IF_NOT))
                iid = f"s2-{aid}-{p}"
                items.append(item(iid, "plant-s2", "relevance", user, prompt_index=p, attribute=aid, attribute_id=aid))
                labels += [label(iid, "hm", "human_majority", "yes" if rel else "no"),
                           label(iid, "plant-pipeline", "system", "yes" if sel else "no")]
                relevant += [aid] if rel else []
                selected += [aid] if sel else []
                records.append((user, bad[aid], rel, sel))
            for cond, used in (("pipeline", selected), ("oracle", relevant)):
                iid = f"s3-{user}-{p}-{cond}"
                items.append(item(iid, "plant-s3", "response", user, prompt_index=p, kind="generic_vs_personalized",
                                  system="writer-w", input_condition=cond, attributes_used=used,
                                  prompt_id=f"{user}_{p}"))
                verdict = rng.choice(["A", "tie"]) if rng.random() < NO_BETTER[cond] else "B"
                labels.append(label(iid, "hm", "human_majority", str(verdict)))
                if any(bad[a] or a not in relevant for a in used):
                    flagged.add(iid)
    return items, labels, flagged
