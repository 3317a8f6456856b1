"""Dashboard page: Agreement matrix, with a jury and its own jurors left out of the group means (issue 32 item 20).

A jury's labels are its jurors' vote, so a jury agrees with its own jurors (and with another jury sharing a juror)
by construction: such pairs are blanked in the matrix and left out of the within- and across-group means.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from personagap.analysis.pairwise import pairwise_from_counts, shared_juror_pairs
from personagap.dashboard import charts, data, queries
from personagap.dashboard.data import TTL_SECONDS, db_path
from personagap.dashboard.display import ci, num
from personagap.dashboard.shell import require_data

EXCLUDED_CAPTION = ("Pairs of a jury with one of its own jurors, and of two juries sharing a juror, are left out of "
                    "the matrix (blank) and of the group means: a jury's labels are its jurors' vote, so their "
                    "agreement is not agreement between independent judges.")


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing pairwise agreement…")
def pairwise(db: str, stage: str, dataset: str) -> dict[str, Any]:
    """Pairwise kappa among every rater of a dataset, with the jury pairs left out of the group means."""
    from personagap.store.dashboard_reads import agreement_counts
    from personagap.store.jury_counts import jury_jurors

    with queries.read_only(db) as con:
        counts = agreement_counts(con, stage, dataset)
        jurors = jury_jurors(con, stage, dataset)
    groups = {str(r): ("human majority" if k == "human_majority" else "human" if k == "human" else "judge")
              for r, k in counts.raters[["rater", "rater_kind"]].itertuples(index=False)}
    items = dict(zip(counts.raters["rater"].astype(str), counts.raters["items"].astype(int), strict=True))
    result = pairwise_from_counts(counts.pairs, items, counts.users, counts.categories, groups,
                                  exclude=shared_juror_pairs(jurors))
    matrix = result.matrix.copy()
    for a, b in result.excluded:
        matrix.loc[a, b] = matrix.loc[b, a] = float("nan")
    summary = pd.DataFrame([{"pairs": k, "mean kappa": num(g.mean_kappa.value), "95% CI": ci(list(g.mean_kappa.ci)),
                             "rater pairs": g.n_pairs}
                            for k, g in result.groups.items()])
    return {"matrix": matrix, "overlap": result.overlap, "groups": groups, "summary": summary,
            "excluded": [f"{a} – {b}" for a, b in result.excluded]}


def agreement_page() -> None:
    """Pairwise kappa among every human and judge who labelled the same items."""
    st.title("Agreement matrix")
    if require_data() is None:
        return
    db = db_path()
    choices = data.matrix_choices(db)
    if choices.empty:
        st.info("No dataset has two raters on the same items yet.")
        return
    keys = [f"{r.stage} · {r.dataset}" for r in choices.itertuples()]
    default = int(choices["raters"].to_numpy().argmax())
    picked = st.selectbox("Stage and dataset", keys, index=default)
    row = choices.iloc[keys.index(picked)]
    result = pairwise(db, str(row["stage"]), str(row["dataset"]))
    st.caption("Cohen's kappa for every pair of raters on the items both labelled (blind humans and comparable "
               "judges; pairs sharing fewer than 10 items are blank). Hover a cell for the shared item count.")
    st.altair_chart(charts.matrix_chart(result["matrix"], result["overlap"], result["groups"]), width="content")
    if result["excluded"]:
        st.caption(EXCLUDED_CAPTION)
        st.caption(f"{len(result['excluded'])} jury pair(s) left out of the group means: "
                   f"{'; '.join(result['excluded'])}.")
    if not result["summary"].empty:
        st.subheader("Mean pairwise kappa within and across groups (95% CI)")
        st.dataframe(result["summary"], hide_index=True)


agreement_page()
