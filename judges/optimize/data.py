"""The data an optimisation runs on: labelled examples, the user split, the class set, the fingerprint."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from personagap.datasets import dataset_records
from personagap.judges.base import Judge, JudgeTask, describe_fit, fits
from personagap.judges.relevance import relevance_tasks
from personagap.judges.response import pairwise_tasks, persona_use_tasks
from personagap.store import opened
from personagap.store.item_reads import blind_reference_of, relevance_prompt_items, response_items
from personagap.store.response_counts import GVP_KIND

DEFAULT_FRACTIONS = (0.5, 0.25, 0.25)


class OptimizeError(ValueError):
    """A request that cannot be run as asked (unknown judge, too few users, a bad program file)."""


class BudgetExhausted(RuntimeError):
    """The optimiser reached ``--budget`` LLM calls; no further call is sent."""


def base_name(judge: Judge) -> str:
    """The registered judge a (possibly optimised, ``base@program``) judge is a version of."""
    return judge.name.split("@", 1)[0]


@dataclass(frozen=True)
class Example:
    """One item with a human reference: the judge's task for it and the label the humans gave."""

    item_id: str
    user_id: str
    task: JudgeTask
    human: str


@dataclass(frozen=True)
class UserSplit:
    """Users of train / dev / test (disjoint), drawn with ``seed``."""

    seed: int
    train: tuple[str, ...]
    dev: tuple[str, ...]
    test: tuple[str, ...]

    def side(self, user: str) -> str | None:
        """'train', 'dev', 'test' or None (a user not in this split)."""
        for name in ("train", "dev", "test"):
            if user in getattr(self, name):
                return name
        return None


def split_users(users: Sequence[str], seed: int, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
                n_users: int | None = None) -> UserSplit:
    """Split users (never items) into train / dev / test.

    Args:
        users: Every user with labelled items.
        seed: Seed of the shuffle (recorded in the sidecar).
        fractions: Shares of train, dev and test (each side gets at least one user).
        n_users: Use only a seeded subset of this many users (a quick or cheap run).

    Raises:
        OptimizeError: Fewer than three users.
    """
    pool = sorted(set(users))
    rng = random.Random(seed)
    rng.shuffle(pool)
    if n_users is not None:
        pool = pool[:n_users]
    if len(pool) < 3:
        raise OptimizeError(f"optimising needs at least 3 users with human labels (train, dev, test); got {len(pool)}")
    n = len(pool)
    n_train = max(1, round(fractions[0] * n))
    n_dev = max(1, round(fractions[1] * n))
    n_train = min(n_train, n - 2)
    n_dev = min(n_dev, n - n_train - 1)
    return UserSplit(seed, tuple(sorted(pool[:n_train])), tuple(sorted(pool[n_train:n_train + n_dev])),
                     tuple(sorted(pool[n_train + n_dev:])))


def human_reference(db: str | Path, item_ids: Sequence[str]) -> dict[str, str]:
    """The blind human reference of each item: :func:`~personagap.analysis.comparable.reference_sql` (the one rule).

    Items whose humans tie have none. DuckDB computes the reference from the store (the reports' query), so
    ``optimize`` and the reports cannot disagree about an item's human label.
    """
    with opened(db, read_only=True) as con:
        return blind_reference_of(con, item_ids)


def dataset_classes(db: str | Path, judge: Judge, datasets: Sequence[str] | None) -> tuple[str, ...]:
    """The class set a judge is optimised over: the categories of the datasets it fits (the dataset record's).

    Raises:
        OptimizeError: No dataset of the judge's stage (of ``datasets``) fits the judge -- its labels are not the
            dataset's categories, or its items are of another kind; the line names the judges that fit instead.
    """
    with opened(db, read_only=True) as con:
        records = [r for (stage, name), r in dataset_records(con).items()
                   if stage == judge.stage and (not datasets or name in datasets)]
    fitting = [r for r in records if fits(judge, r)]
    if fitting:
        return fitting[0].scale.categories
    said = "; ".join(describe_fit(r) for r in records) or f"no {judge.stage} dataset; import a release first"
    raise OptimizeError(f"{db}: no dataset fits judge {base_name(judge)!r} ({judge.item_kind} items labelled "
                        f"{'/'.join(judge.categories)}): {said}")


def load_examples(db: str | Path, judge: Judge, *, datasets: tuple[str, ...] | None = None,
                  seed: int = 0) -> tuple[list[Example], list[JudgeTask], pd.DataFrame]:
    """Every item the judge can label, with the human reference where there is one.

    Returns:
        (examples with a human label, every task of the judge, the items frame with ``user_id`` per item).
    """
    datasets = datasets or default_datasets(judge)
    if base_name(judge) == "relevance-per-attribute":
        with opened(db, read_only=True) as con:
            items = relevance_prompt_items(con, datasets or ())
        tasks = relevance_tasks(judge, items)
    else:
        with opened(db, read_only=True) as con:
            items = response_items(con)
        if datasets:
            items = items[items["dataset"].isin(datasets)]
        if base_name(judge) == "persona-use":
            items = items[items["kind"] == "persona_use"]
            tasks = persona_use_tasks(items)
        else:
            items = items[items["kind"].isin(["pairwise", GVP_KIND])]
            tasks = pairwise_tasks(items, profile=True, seed=seed)
    items = items.reset_index(drop=True)
    users = dict(zip(items["item_id"].astype(str), items["user_id"].astype(str), strict=True))
    reference = human_reference(db, [t.targets[0] for t in tasks])
    classes = dataset_classes(db, judge, datasets)
    examples = [Example(t.targets[0], users[t.targets[0]], t, reference[t.targets[0]]) for t in tasks
                if reference.get(t.targets[0]) in classes]
    return examples, tasks, items


def data_fingerprint(examples: Sequence[Example]) -> str:
    """sha256 of the labelled data (item, user, inputs, human label; order-free)."""
    rows = sorted(json.dumps([e.item_id, e.user_id, e.task.inputs, e.human], sort_keys=True, ensure_ascii=False)
                  for e in examples)
    return hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest()


def split_examples(examples: Sequence[Example], split: UserSplit,
                    max_items: int | None = None) -> dict[str, list[Example]]:
    out: dict[str, list[Example]] = {"train": [], "dev": [], "test": []}
    for e in examples:
        side = split.side(e.user_id)
        if side is not None:
            out[side].append(e)
    if max_items is not None:
        # Sampled within each side, after the users were split: a smaller run, never a leak.
        out = {k: sorted(random.Random(split.seed).sample(v, min(max_items, len(v))), key=lambda e: e.item_id)
               for k, v in out.items()}
    return out


def default_datasets(judge: Judge) -> tuple[str, ...] | None:
    """The datasets :func:`load_examples` reads when none are given (the study's stage-2 data for relevance)."""
    return ("recenter-stage2",) if base_name(judge) == "relevance-per-attribute" else None
