"""What every other judge says of an LLM selector's selection (stage 2), from one pass over the judges' labels.

An LLM relevance labeller used as a selector is judged by the other comparable judges as a pipeline's own selection
is: per judge, its "relevant" verdicts on the attributes the selector selected (``g1``) and on those it left out
(``g0``), with their confusion counts against the human reference. Crossing every LLM with every other label by
label would read each item's labels k² times; instead DuckDB reduces each relevance item to two bit masks (which
judges labelled it, which said "relevant"), counted per (dataset, user, reference, masks), and each (selector,
judge) pair's per-user counts are sums over those few rows.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from personagap.store.pipeline_counts import cross_masks as _masks

MAX_JUDGES = 62
"""Judges one signed 64-bit mask holds (a bit per judge, one spare)."""
_COLS = ["j_n", "j_pos", "tp", "fn", "fp", "tn"]
_CELLS = 12
"""Cells of one (user, selector, judge): left out / selected x judge says no / yes x no reference / other / selected."""


def cross_judges(con: duckdb.DuckDBPyConnection, selectors: pd.DataFrame, judges: pd.DataFrame, *, reference: str,
                 selected: str) -> pd.DataFrame:
    """Every other judge's per-user counts on each LLM selector's selected and left-out attributes.

    Args:
        con: An open store connection.
        selectors: ``dataset``, ``rater`` (``condition`` '') of the LLM selectors.
        judges: ``rater``, ``condition`` of every comparable judge of the relevance stage.
        reference: The table holding the blind reference (``item_id``, ``human``).
        selected: The label of a selected / relevant attribute (humans' and judges').

    Returns:
        Columns ``dataset``, ``system`` (the selector), ``rater``, ``condition`` (the judge), ``user_id`` and the six
        judge counts suffixed ``_g1`` (selected) and ``_g0`` (left out), as
        :func:`personagap.analysis.pipeline_sql.stage2_counts` gives them for a pipeline's selection.

    Raises:
        ValueError: More than :data:`MAX_JUDGES` judges (one mask cannot hold them).
    """
    if selectors.empty:
        return pd.DataFrame()
    pool = judges[["rater", "condition"]].drop_duplicates().sort_values(["rater", "condition"], ignore_index=True)
    if len(pool) > MAX_JUDGES:
        raise ValueError(f"{len(pool)} relevance judges: at most {MAX_JUDGES} can judge LLM selectors")
    pool["k"] = np.arange(len(pool), dtype=np.int64)
    rows = _masks(con, pool, reference, selected)
    # Users coded once (sorted, as a sorted groupby gives them): each pair's per-user sums are bincounts. A row
    # without a user is left out, as groupby leaves out a missing key.
    codes, users = pd.factorize(rows["user_id"], sort=True)
    rows, codes = rows[codes >= 0].reset_index(drop=True), codes[codes >= 0]
    if rows.empty:
        return pd.DataFrame()
    users = np.asarray(users, dtype=object)
    seen, yes, n = (rows[c].to_numpy(dtype=np.int64) for c in ("seen", "yes", "n"))
    has_ref = rows["human"].isin([selected, "no"]).to_numpy()
    human_yes = rows["human"].eq(selected).to_numpy()
    key = {(str(r), str(c)): int(k) for r, c, k in pool.itertuples(index=False)}
    # The human reference of each row: 2 the selected label, 1 another reference label, 0 none.
    ref = np.where(human_yes, 2, np.where(has_ref, 1, 0)).astype(np.int64)
    out = []
    for ds, system in selectors[["dataset", "rater"]].drop_duplicates().itertuples(index=False):
        s = key.get((str(system), ""))
        if s is None:
            continue
        mine = rows["dataset"].eq(ds).to_numpy()
        s_seen, s_yes = (seen >> s) & 1 == 1, (yes >> s) & 1 == 1
        for (rater, condition), k in key.items():
            if k == s:
                continue  # a selector is never its own judge
            j_seen, j_yes = (seen >> k) & 1 == 1, (yes >> k) & 1 == 1
            # The rows of items both labelled: every cell below counts a subset of them, and their users are the
            # users of the pair.
            both = mine & s_seen & j_seen
            present = np.bincount(codes[both], minlength=len(users)) > 0
            if not present.any():
                continue
            # One weighted count per (user, cell): cell = selected-or-left-out (2) x judge says selected (2) x
            # reference (3); the six counts of each group are sums over cells.
            cell = s_yes[both] * 6 + j_yes[both] * 3 + ref[both]
            table = np.bincount(codes[both] * _CELLS + cell, weights=n[both], minlength=len(users) * _CELLS)
            table = table.reshape(len(users), 2, 2, 3)[present].astype(np.int64)
            cells: dict[str, np.ndarray] = {}
            for group, g in (("_g1", 1), ("_g0", 0)):
                t = table[:, g]  # (users, judge says selected, reference)
                for name, value in zip(_COLS, (t.sum(axis=(1, 2)), t[:, 1].sum(axis=1), t[:, 1, 2], t[:, 0, 2],
                                               t[:, 1, 1], t[:, 0, 1]), strict=True):
                    cells[name + group] = value
            per_user = pd.DataFrame({"user_id": users[present]} | cells)
            out.append(per_user.assign(dataset=ds, system=system, rater=rater, condition=condition))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()
