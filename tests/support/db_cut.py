"""Cut a test database down to the items of a few users, so that tests on the real releases stay quick."""

from __future__ import annotations

from pathlib import Path

import duckdb


def keep_first_users(db: Path, n: int, dataset: str) -> list[str]:
    """Delete the items (and their labels) of every user of ``dataset`` but the first ``n`` by id.

    Returns:
        The users kept.
    """
    con = duckdb.connect(str(db))
    try:
        keep = [u for (u,) in con.execute("SELECT DISTINCT user_id FROM items WHERE dataset = ? ORDER BY user_id",
                                          [dataset]).fetchall()][:n]
        gone = "SELECT item_id FROM items WHERE dataset = ? AND user_id NOT IN (SELECT unnest(?))"
        con.execute(f"DELETE FROM labels WHERE item_id IN ({gone})", [dataset, keep])
        con.execute(f"DELETE FROM items WHERE item_id IN ({gone})", [dataset, keep])
    finally:
        con.close()
    return keep
