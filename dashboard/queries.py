"""Read-only SQL behind the dashboard; plain functions over a DB path, no Streamlit.

Each function opens the store read-only for one short batch of queries and closes
it again, because DuckDB lets a writer in only while no other process holds the
file: a long judge run can then write between two dashboard queries, and the
dashboard retries briefly (:func:`personagap.store.connect`) while a batch lands.

Every filter is a bound parameter. The SQL text is static: optional filters use the
``(? IS NULL OR col = ?)`` form instead of being appended as strings.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from personagap.analysis.comparable import blind_human_sql, comparable_judge_sql, judge_display_sql
from personagap.analysis.diagnosis import REFERENCE_SQL
from personagap.dashboard import access
from personagap.store import connect

#: Disagreement kinds offered by the browser: key -> (label, SQL meaning documented in _DISAGREEMENT_SQL).
DISAGREEMENT_KINDS: dict[str, str] = {
    "any": "any disagreement",
    "judge_yes_human_no": "judge yes / human no",
    "judge_no_human_yes": "judge no / human yes",
    "judge_failed": "judge answer unparseable",
    "all": "all judge labels (agreements too)",
}


@dataclass(frozen=True)
class DisagreementFilter:
    """Filters of the disagreement browser; ``None`` means no filter."""

    stage: str | None = None
    dataset: str | None = None
    judge: str | None = None
    user: str | None = None
    kind: str = "any"
    text: str | None = None


#: How long a read waits for a writer (a judge run's batch, an import) to let go of the file.
READ_WAIT_SECONDS = 30.0


@contextlib.contextmanager
def read_only(db: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the store read-only for one batch of queries, through this process's gate (see :mod:`.access`)."""
    with access.reading():
        con = connect(db, read_only=True, wait_seconds=READ_WAIT_SECONDS)
        try:
            yield con
        finally:
            con.close()


def db_state(db: str | Path) -> dict[str, int]:
    """Return row counts of the main tables (all zero for a fresh store)."""
    with read_only(db) as con:
        row = con.execute("""
            SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM labels), (SELECT count(*) FROM runs),
                   (SELECT count(*) FROM users)
        """).fetchall()[0]
    return {"items": int(row[0]), "labels": int(row[1]), "runs": int(row[2]), "users": int(row[3])}


def filter_options(db: str | Path) -> dict[str, list[str]]:
    """Distinct stages, datasets and judges present, for filter widgets."""
    with read_only(db) as con:
        stages = [r[0] for r in con.execute("SELECT DISTINCT stage FROM items ORDER BY 1").fetchall()]
        datasets = [r[0] for r in con.execute("SELECT DISTINCT dataset FROM items ORDER BY 1").fetchall()]
        judges = [r[0] for r in con.execute(
            f"SELECT DISTINCT rater FROM labels l WHERE {comparable_judge_sql('l')} ORDER BY 1"
        ).fetchall()]
    return {"stage": stages, "dataset": datasets, "judge": judges}


def stage_inventory(db: str | Path, stage: str) -> pd.DataFrame:
    """Labels of one stage counted per dataset, rater kind, rater and condition."""
    with read_only(db) as con:
        return con.execute("""
            SELECT i.dataset, l.rater_kind, l.rater, l.condition, count(*) AS labels,
                   count(*) FILTER (WHERE l.label IS NULL) AS failures, count(DISTINCT i.user_id) AS users
            FROM labels l JOIN items i USING (item_id)
            WHERE i.stage = ?
            GROUP BY ALL ORDER BY 1, 2, 3, 4
        """, [stage]).df()


def bias_labels(db: str | Path, stage: str) -> pd.DataFrame:
    """Yes/no labels of every comparable judge and the blind human reference, with position and length.

    Rows: ``rater``, ``who`` ('humans' | 'judge'), ``user_id``, ``position`` (the attribute's place in
    its list, where the release keys by it), ``length`` (characters of the attribute) and ``hit`` (1 = yes).
    """
    with read_only(db) as con:
        return con.execute(f"""
            WITH {REFERENCE_SQL}
            SELECT {judge_display_sql('l')} AS rater,
                   'judge' AS who, i.user_id, i.position, length(i.attribute) AS length,
                   CASE l.label WHEN 'yes' THEN 1 ELSE 0 END AS hit
            FROM labels l JOIN items i USING (item_id)
            WHERE i.stage = ? AND {comparable_judge_sql('l')} AND l.label IN ('yes', 'no')
            UNION ALL
            SELECT 'humans (reference)', 'humans', i.user_id, i.position, length(i.attribute),
                   CASE r.human WHEN 'yes' THEN 1 ELSE 0 END
            FROM reference r JOIN items i USING (item_id)
            WHERE i.stage = ? AND r.human IN ('yes', 'no')
        """, [stage, stage]).df()


def panel_reference(db: str | Path, stage: str) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """What the robust panel needs beyond the diagnosis, aggregated in SQL (no label is loaded one by one).

    Returns:
        ``reference``: per ``dataset``, ``user_id`` and blind reference label ``human``, the count ``n`` of the
        stage's items with that reference; ``scales``: per dataset, the categories its comparisons are scored
        over (:func:`personagap.analysis.diagnosis.stage_scales`, the diagnosis's own rule). Which labels count
        is :mod:`personagap.analysis.comparable`'s rule.
    """
    from personagap.analysis.diagnosis import stage_scales

    with read_only(db) as con:
        reference = con.execute(f"""
            WITH {REFERENCE_SQL}
            SELECT i.dataset, i.user_id, r.human, count(*) AS n
            FROM reference r JOIN items i USING (item_id)
            WHERE i.stage = ?
            GROUP BY ALL
        """, [stage]).df()
        scales = stage_scales(con, stage)
    return reference, scales


def panel_pair_counts(db: str | Path, stage: str, datasets: list[str]) -> pd.DataFrame:
    """Per judge (rater, rater_kind, condition), user, reference label and judge label: the count of items.

    Only for ``datasets`` (the robust panel asks for those whose label set differs from a judge's own).

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``human``, ``label``, ``n``.
    """
    with read_only(db) as con:
        return con.execute(f"""
            WITH {REFERENCE_SQL}
            SELECT i.dataset, l.rater, l.rater_kind, l.condition, i.user_id, r.human, l.label, count(*) AS n
            FROM labels l JOIN reference r USING (item_id) JOIN items i USING (item_id)
            WHERE i.stage = ? AND list_contains(?, i.dataset) AND {comparable_judge_sql('l')}
              AND l.label IS NOT NULL
            GROUP BY ALL
        """, [stage, list(datasets)]).df()


# Raters of the agreement matrix (comparable.py's rule): blind humans, and every comparable judge label,
# a judge under a non-default condition shown as its own rater ("gpt [no-profile]").
_MATRIX_RATERS = f"""
    SELECT l.item_id, l.rater_kind, l.label, i.stage, i.dataset, i.user_id,
           {judge_display_sql('l')} AS rater
    FROM labels l JOIN items i USING (item_id)
    WHERE l.label IS NOT NULL AND ({blind_human_sql('l')} OR {comparable_judge_sql('l')})
"""


def agreement_labels(db: str | Path, stage: str, dataset: str) -> pd.DataFrame:
    """Long labels (item_id, rater, rater_kind, label, cluster) of one dataset for the pairwise matrix.

    Blind human labels and comparable judge labels only (:mod:`personagap.analysis.comparable`); failures
    are never verdicts.
    """
    with read_only(db) as con:
        return con.execute(f"""
            SELECT item_id, rater, rater_kind, label, user_id AS cluster FROM ({_MATRIX_RATERS})
            WHERE stage = ? AND dataset = ?
        """, [stage, dataset]).df()


def matrix_choices(db: str | Path) -> pd.DataFrame:
    """(stage, dataset) pairs with at least two raters, with rater and label counts."""
    with read_only(db) as con:
        return con.execute(f"""
            SELECT stage, dataset, count(DISTINCT rater) AS raters, count(*) AS labels
            FROM ({_MATRIX_RATERS})
            GROUP BY ALL HAVING count(DISTINCT rater) >= 2 ORDER BY 1, 2
        """).df()


_DISAGREEMENT_SQL = f"""
    WITH {REFERENCE_SQL},
    cases AS (
        SELECT i.stage, i.dataset, i.user_id, i.prompt_index, i.attribute, i.item_id, l.rater AS judge,
               l.condition, l.label AS judge_label, r.human AS human_label, l.error, l.reason, l.raw
        FROM labels l JOIN items i USING (item_id) JOIN reference r USING (item_id)
        WHERE {comparable_judge_sql('l')}
          AND (CAST(? AS TEXT) IS NULL OR i.stage = ?)
          AND (CAST(? AS TEXT) IS NULL OR i.dataset = ?)
          AND (CAST(? AS TEXT) IS NULL OR l.rater = ?)
          AND (CAST(? AS TEXT) IS NULL OR i.user_id = ?)
          AND CASE ?
                WHEN 'any' THEN l.label IS NOT NULL AND l.label <> r.human
                WHEN 'judge_yes_human_no' THEN l.label = 'yes' AND r.human = 'no'
                WHEN 'judge_no_human_yes' THEN l.label = 'no' AND r.human = 'yes'
                WHEN 'judge_failed' THEN l.label IS NULL
                WHEN 'all' THEN TRUE
                ELSE FALSE
              END
    )
    SELECT c.* EXCLUDE (reason, raw)
    FROM cases c LEFT JOIN prompts p USING (dataset, user_id, prompt_index)
    WHERE CAST(? AS TEXT) IS NULL
       OR contains(lower(coalesce(c.attribute, '')), lower(?))
       OR contains(lower(coalesce(p.prompt_text, '')), lower(?))
       OR contains(lower(coalesce(c.reason, '')), lower(?))
       OR contains(lower(coalesce(c.raw, '')), lower(?))
       OR contains(lower(c.user_id), lower(?))
"""


def _disagreement_params(f: DisagreementFilter) -> list[Any]:
    text = f.text.strip() if f.text and f.text.strip() else None
    return [f.stage, f.stage, f.dataset, f.dataset, f.judge, f.judge, f.user, f.user, f.kind,
            text, text, text, text, text, text]


def count_disagreements(db: str | Path, f: DisagreementFilter) -> int:
    """Number of judge labels matching the filter."""
    with read_only(db) as con:
        return int(con.execute(f"SELECT count(*) FROM ({_DISAGREEMENT_SQL})", _disagreement_params(f)).fetchall()[0][0])


def disagreements_page(db: str | Path, f: DisagreementFilter, *, limit: int = 50, offset: int = 0) -> pd.DataFrame:
    """One page of judge labels matching the filter, in a stable order (paged in SQL)."""
    with read_only(db) as con:
        return con.execute(
            f"SELECT * FROM ({_DISAGREEMENT_SQL}) "
            "ORDER BY stage, dataset, user_id, prompt_index, attribute, item_id, judge, condition LIMIT ? OFFSET ?",
            [*_disagreement_params(f), int(limit), int(offset)],
        ).df()


def case_detail(db: str | Path, item_id: str) -> dict[str, Any] | None:
    """Everything about one item: the item, its prompt, the user's profile and every label on it.

    Returns:
        ``item`` (dict, payload decoded), ``prompt_text``, ``profile_text``, ``profile`` (attributes frame)
        and ``labels`` (frame), or None when the item does not exist.
    """
    with read_only(db) as con:
        items = con.execute("SELECT * FROM items WHERE item_id = ?", [item_id]).df()
        if items.empty:
            return None
        item = items.iloc[0].to_dict()
        ds, user, prompt_index = item["dataset"], item["user_id"], item["prompt_index"]
        prompt_index = None if pd.isna(prompt_index) else int(prompt_index)
        prompt = con.execute("SELECT prompt_text FROM prompts WHERE dataset = ? AND user_id = ? AND prompt_index = ?",
                             [ds, user, prompt_index]).fetchall()
        if not prompt or prompt[0][0] is None:
            # Pilot items reuse the stage-2 users' prompts under another dataset key.
            prompt = con.execute(
                "SELECT prompt_text FROM prompts WHERE user_id = ? AND prompt_index = ? "
                "AND prompt_text IS NOT NULL ORDER BY dataset LIMIT 1", [user, prompt_index]).fetchall()
        profile = con.execute("""
            SELECT dataset, attribute, reason, confidence FROM attributes
            WHERE user_id = ? AND dataset = coalesce(
                (SELECT any_value(dataset) FROM attributes WHERE user_id = ? AND dataset = ?),
                (SELECT min(dataset) FROM attributes WHERE user_id = ?))
            ORDER BY attribute
        """, [user, user, ds, user]).df()
        profile_text = con.execute("SELECT profile_text FROM users WHERE user_id = ? ORDER BY dataset = ? DESC LIMIT 1",
                                   [user, ds]).fetchall()
        labels = con.execute("""
            SELECT rater, rater_kind, condition, label, error, reason, raw, run_id, meta FROM labels
            WHERE item_id = ?
            ORDER BY CASE rater_kind WHEN 'human_majority' THEN 0 WHEN 'human' THEN 1 ELSE 2 END, rater, condition
        """, [item_id]).df()
    payload = item.get("payload")
    item["payload"] = json.loads(payload) if isinstance(payload, str) and payload else {}
    return {
        "item": item,
        "prompt_text": prompt[0][0] if prompt else None,
        "profile_text": profile_text[0][0] if profile_text else None,
        "profile": profile,
        "labels": labels,
    }


def runs(db: str | Path) -> pd.DataFrame:
    """Every run with how many labels it wrote, newest first."""
    from personagap.liveness import effective_status  # core, not judges/: the dashboard never loads DSPy

    with read_only(db) as con:
        frame = con.execute("""
            SELECT r.run_id, r.kind, r.rater, r.status, r.started_at, r.finished_at, r.judge_version, r.git_sha,
                   r.source, coalesce(c.labels, 0) AS labels, coalesce(c.failures, 0) AS failures,
                   CAST(r.parameters AS TEXT) AS parameters
            FROM runs r LEFT JOIN (
                SELECT run_id, count(*) AS labels, count(*) FILTER (WHERE label IS NULL) AS failures
                FROM labels GROUP BY run_id
            ) c USING (run_id)
            ORDER BY r.started_at DESC, r.run_id
        """).df()
    # A killed judge run never wrote its end: show it as 'interrupted' once its process is gone.
    frame["status"] = [effective_status(str(s), p) for s, p in zip(frame["status"], frame["parameters"], strict=True)]
    return frame


def best_run_pair(db: str | Path) -> tuple[str, str] | None:
    """The two runs that labelled the most items in common (the Runs page's default comparison)."""
    with read_only(db) as con:
        rows = con.execute("""
            WITH r AS (SELECT DISTINCT run_id, item_id FROM labels)
            SELECT a.run_id, b.run_id, count(*) AS shared
            FROM r a JOIN r b ON a.item_id = b.item_id AND a.run_id < b.run_id
            GROUP BY ALL ORDER BY shared DESC, 1, 2 LIMIT 1
        """).fetchall()
    return (str(rows[0][0]), str(rows[0][1])) if rows else None


def compare_runs(db: str | Path, run_a: str, run_b: str) -> dict[str, Any]:
    """Compare the labels two runs wrote on the items both labelled.

    Returns:
        ``summary`` (one-row frame: labels of each run, shared items, agreeing items),
        ``crosstab`` (label of A x label of B counts) and ``differences`` (up to 200 differing items).
    """
    with read_only(db) as con:
        shared_sql = """
            WITH a AS (SELECT item_id, condition, label FROM labels WHERE run_id = ?),
                 b AS (SELECT item_id, condition, label FROM labels WHERE run_id = ?),
                 s AS (SELECT a.item_id, a.condition, a.label AS label_a, b.label AS label_b
                       FROM a JOIN b USING (item_id, condition))
        """
        params = [run_a, run_b]
        summary = con.execute(shared_sql + """
            SELECT (SELECT count(*) FROM a) AS labels_a, (SELECT count(*) FROM b) AS labels_b,
                   count(*) AS shared, count(*) FILTER (WHERE label_a IS NOT DISTINCT FROM label_b) AS agree
            FROM s
        """, params).df()
        crosstab = con.execute(shared_sql + """
            SELECT coalesce(label_a, '(failed)') AS label_a, coalesce(label_b, '(failed)') AS label_b, count(*) AS n
            FROM s GROUP BY ALL ORDER BY 1, 2
        """, params).df()
        differences = con.execute(shared_sql + """
            SELECT i.stage, i.dataset, i.user_id, i.prompt_index, i.attribute, s.item_id, s.label_a, s.label_b
            FROM s JOIN items i USING (item_id)
            WHERE s.label_a IS DISTINCT FROM s.label_b
            ORDER BY i.dataset, i.user_id, i.prompt_index, i.attribute LIMIT 200
        """, params).df()
    return {"summary": summary, "crosstab": crosstab, "differences": differences}
