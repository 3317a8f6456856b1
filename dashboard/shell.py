"""What every page shares: the sidebar (database, Refresh) and the guidance shown when there is nothing to show."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from personagap.dashboard import data
from personagap.dashboard.data import db_path
from personagap.dashboard.display import md
from personagap.store import StoreError

PAGE_SIZE = 25


GUIDANCE = """
**Get data into PersonaGap first**, then press *Refresh*:

```
personagap import recenter ../shared/data/recenter --db {db}   # real human + LLM labels
personagap judge relevance --model openai/gpt-4o-mini --db {db}  # add your own judge
personagap demo --db {db}                                        # or: built-in sample data
```
"""


def sidebar() -> None:
    """Database path and the Refresh button."""
    db = db_path()
    st.sidebar.markdown("**PersonaGap** · judges vs real humans")
    st.sidebar.caption(f"Database: `{db.replace('`', '')}`")
    if st.sidebar.button("Refresh", help="Re-read the database (queries are cached for a minute)."):
        st.cache_data.clear()
    from personagap.dashboard import annotate

    # Labels given on the Annotate page while a writer held the file are written from whichever page is open.
    if annotate.has_pending(db) and annotate.flush(db, wait_seconds=0.1).written:
        st.cache_data.clear()


def require_data() -> dict[str, int] | None:
    """Return the store's row counts, or show guidance (not a traceback) when there is nothing to show."""
    db = db_path()
    if not Path(db).exists():
        st.info(f"No PersonaGap database at `{db}` yet.")
        st.markdown(GUIDANCE.format(db=db))
        return None
    try:
        state = data.db_state(db)
    except StoreError as exc:
        st.error(f"Cannot read the database: {md(exc)}")
        return None
    if state["labels"] == 0:
        st.info(f"The database `{db}` is empty: no labels stored yet.")
        st.markdown(GUIDANCE.format(db=db))
        return None
    return state
