"""The Annotate queue's numpy sorts (:func:`annotate.order_queue`) give the pandas sorts that define each order.

The oracle below is the orders as pandas sorts spelled them (frames sorted by the named keys, NaN last, ties kept in
the items' order; ``random``'s strata grouped and interleaved by ``groupby``). Tie-heavy per-item scores (few
distinct shares, certainties and labels, items without any judge or without the best judge) and repeated tie-break
values, under several seeds: every row of every order must be the same.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from personagap.dashboard import annotate


def _oracle(queue: annotate.Queue, order: str, tie: np.ndarray) -> pd.DataFrame:
    frame = pd.DataFrame({"item_id": np.asarray(queue.items, dtype=object), "tie": tie, "stratum": ""})
    has_best = queue.best_n > 0
    if order == "disagreement":
        with np.errstate(divide="ignore", invalid="ignore"):
            share = 1.0 - queue.top / queue.total
        frame["score"] = np.where(queue.total > 0, share, -1.0) if (queue.total > 0).any() else 0.0
        frame = frame.sort_values(["score", "tie"], ascending=[False, True])
    elif order == "uncertain":
        with np.errstate(divide="ignore", invalid="ignore"):
            inconsistency = np.where(has_best, 1.0 - queue.best_top / queue.best_n, np.nan)
            contradicted = np.where(has_best & (queue.other_n > 0), queue.other_diff / queue.other_n, 0.0)
        certainty = np.where(has_best, queue.certainty, np.nan)
        frame["score"] = pd.Series(1.0 - certainty).fillna(pd.Series(inconsistency)).to_numpy()
        frame["second"], frame["has_best"] = contradicted, has_best
        frame = frame.sort_values(["has_best", "score", "second", "tie"], ascending=[False, False, False, True])
        frame["score"] = frame["score"].fillna(0.0)
    else:
        frame["stratum"] = (np.where(has_best, queue.best_label, "(no label)") if has_best.any() else "(all)")
        frame["stratum"] = frame["stratum"].astype(str)
        frame = frame.sort_values(["stratum", "tie"])
        size = frame.groupby("stratum")["item_id"].transform("size")
        frame["score"] = (frame.groupby("stratum").cumcount() + frame["tie"]) / size
        frame = frame.sort_values(["score", "tie"])
    frame = frame.reset_index(drop=True)
    frame["rank"] = range(len(frame))
    return frame[["item_id", "score", "stratum", "rank"]]


def _scores(rng: np.random.Generator, n: int) -> pd.DataFrame:
    total = rng.choice([0, 1, 2, 3, 4], n)
    top = np.minimum(total, rng.choice([1, 2, 3], n))
    best_n = np.where(total > 0, rng.choice([0, 1, 2], n), 0)
    best_top = np.minimum(best_n, rng.choice([1, 2], n))
    other_n = np.where(best_n > 0, total - np.minimum(total, best_n), 0)
    certainty = np.where(rng.random(n) < 0.5, rng.choice([0.25, 0.5, 0.75], n), np.nan)
    label = np.where(best_n > 0, rng.choice(["yes", "no", "maybe", "(no label)", "Zed"], n), None)
    return pd.DataFrame({"item_id": [f"i{k:04d}" for k in range(n)], "total": total, "top": top,
                         "best_n": best_n, "best_top": best_top, "best_label": label, "other_n": other_n,
                         "other_diff": np.minimum(other_n, rng.choice([0, 1], n)), "certainty": certainty})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_order_is_the_pandas_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = _scores(rng, 600)
    for name, frame in (("all", scores), ("no best judge", scores.assign(best_n=0, best_label=None)),
                        ("no judge", scores.assign(total=0, best_n=0, best_label=None))):
        queue = annotate.prepare_queue(frame["item_id"].tolist(), frame)
        # Repeated tie-breaks too: equal (score, tie) keys must keep the items' order, as pandas' sorts do.
        for tie in (annotate._units(seed, frame["item_id"].tolist()), rng.choice([0.1, 0.2, 0.3], len(frame))):
            queue.ties[seed] = tie
            for order in ("disagreement", "uncertain", "random"):
                got = annotate.order_queue(queue, order, seed=seed)  # type: ignore[arg-type]
                want = _oracle(queue, order, tie)
                assert got["item_id"].tolist() == want["item_id"].tolist(), (name, order)
                assert got["stratum"].tolist() == want["stratum"].tolist(), (name, order)
                np.testing.assert_array_equal(got["score"].to_numpy(), want["score"].to_numpy())
                assert got["rank"].tolist() == list(range(len(frame)))


def test_items_given_in_another_order_or_twice_are_looked_up() -> None:
    scores = _scores(np.random.default_rng(5), 50)
    items = list(reversed(scores["item_id"].tolist())) + ["i0003", "unknown"]
    queue = annotate.prepare_queue(items, scores)
    assert list(queue.items) == [*reversed(scores["item_id"].tolist()), "unknown"]
    direct = annotate.order_items(items, scores, "disagreement", seed=4)
    assert direct.equals(annotate.order_queue(queue, "disagreement", seed=4))
    assert direct.loc[direct["item_id"] == "unknown", "score"].item() == -1.0  # no judge label: last


@pytest.mark.parametrize("best", ["b", "nobody", None])
def test_the_pages_queue_orders_as_order_items(tmp_path: Path, best: str | None) -> None:
    from tests.dashboard.test_annotate_sql import _random_store

    db = tmp_path / "q.duckdb"
    _random_store(db, 4)
    held = annotate.read_queue(db, "relevance", "d", best)  # what the Annotate page holds per store state
    items, scores = annotate.queue_inputs(db, "relevance", "d", meta_of=best or "")
    for order in ("disagreement", "uncertain", "random", "routed"):
        for seed in (0, 3):
            routed = items[::4] if order == "routed" else None
            want = annotate.order_items(items, scores, order, best_judge=best, seed=seed, routed=routed)  # type: ignore[arg-type]
            pd.testing.assert_frame_equal(annotate.order_queue(held, order, seed=seed, routed=routed), want)  # type: ignore[arg-type]
