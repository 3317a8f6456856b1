"""Read-only SQL behind the dashboard; plain functions over a DB path, no Streamlit.

Each function opens the store read-only for one short batch of queries and closes
it again, because DuckDB lets a writer in only while no other process holds the
file: a long judge run can then write between two dashboard queries, and the
dashboard retries briefly (:func:`personagap.store.connect`) while a batch lands.

Every filter is a bound parameter. The SQL text is static: optional filters use the
``(? IS NULL OR col = ?)`` form instead of being appended as strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from personagap.analysis.diagnosis import REFERENCE_SQL
from personagap.store import opened

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


def db_state(db: str | Path) -> dict[str, int]:
    """Return row counts of the main tables (all zero for a fresh store)."""
    with opened(db, read_only=True) as con:
        row = con.execute("""
            SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM labels), (SELECT count(*) FROM runs),
                   (SELECT count(*) FROM users)
        """).fetchall()[0]
    return {"items": int(row[0]), "labels": int(row[1]), "runs": int(row[2]), "users": int(row[3])}


def filter_options(db: str | Path) -> dict[str, list[str]]:
    """Distinct stages, datasets and judges present, for filter widgets."""
    with opened(db, read_only=True) as con:
        stages = [r[0] for r in con.execute("SELECT DISTINCT stage FROM items ORDER BY 1").fetchall()]
        datasets = [r[0] for r in con.execute("SELECT DISTINCT dataset FROM items ORDER BY 1").fetchall()]
        judges = [r[0] for r in con.execute(
            "SELECT DISTINCT rater FROM labels WHERE rater_kind IN ('llm', 'trained', 'baseline') ORDER BY 1"
        ).fetchall()]
    return {"stage": stages, "dataset": datasets, "judge": judges}


def stage_inventory(db: str | Path, stage: str) -> pd.DataFrame:
    """Labels of one stage counted per dataset, rater kind, rater and condition."""
    with opened(db, read_only=True) as con:
        return con.execute("""
            SELECT i.dataset, l.rater_kind, l.rater, l.condition, count(*) AS labels,
                   count(*) FILTER (WHERE l.label IS NULL) AS failures, count(DISTINCT i.user_id) AS users
            FROM labels l JOIN items i USING (item_id)
            WHERE i.stage = ?
            GROUP BY ALL ORDER BY 1, 2, 3, 4
        """, [stage]).df()


def bias_table(db: str | Path, stage: str) -> pd.DataFrame:
    """Yes-rate (or first-answer rate) per judge and the human reference, by position and by length.

    Rows: ``rater``, ``factor`` ('attribute length' quartile, 'position', 'swapped'), ``bucket``,
    ``n`` and ``rate``. Binary labels give the yes-rate; A/B labels give the share choosing A.
    """
    with opened(db, read_only=True) as con:
        return con.execute(f"""
            WITH {REFERENCE_SQL},
            rated AS (
                SELECT l.rater, l.label, i.attribute, i.position,
                       try_cast(json_extract_string(l.meta, '$.swapped') AS BOOLEAN) AS swapped
                FROM labels l JOIN items i USING (item_id)
                WHERE i.stage = ? AND l.rater_kind IN ('llm', 'trained', 'baseline') AND l.label IS NOT NULL
                UNION ALL
                SELECT 'human reference' AS rater, r.human AS label, i.attribute, i.position, NULL AS swapped
                FROM reference r JOIN items i USING (item_id)
                WHERE i.stage = ?
            ),
            coded AS (
                SELECT *, CASE WHEN label IN ('yes', 'A') THEN 1.0 WHEN label IN ('no', 'B') THEN 0.0 END AS hit,
                       ntile(4) OVER (ORDER BY length(attribute)) AS len_q
                FROM rated
            )
            SELECT rater, 'attribute length' AS factor, 'Q' || len_q AS bucket, count(*) AS n, avg(hit) AS rate
            FROM coded WHERE attribute IS NOT NULL AND hit IS NOT NULL GROUP BY ALL
            UNION ALL
            SELECT rater, 'position', CAST(position AS TEXT), count(*), avg(hit)
            FROM coded WHERE position IS NOT NULL AND hit IS NOT NULL GROUP BY ALL
            UNION ALL
            SELECT rater, 'swapped', CAST(swapped AS TEXT), count(*), avg(hit)
            FROM coded WHERE swapped IS NOT NULL AND hit IS NOT NULL GROUP BY ALL
            ORDER BY 1, 2, 3
        """, [stage, stage]).df()


def agreement_labels(db: str | Path, stage: str, dataset: str) -> pd.DataFrame:
    """Long labels (item_id, rater, rater_kind, label, cluster) of one dataset for the pairwise matrix.

    Only the default protocol (condition '') and parsed labels: failures are never verdicts.
    """
    with opened(db, read_only=True) as con:
        return con.execute("""
            SELECT l.item_id, l.rater, l.rater_kind, l.label, i.user_id AS cluster
            FROM labels l JOIN items i USING (item_id)
            WHERE i.stage = ? AND i.dataset = ? AND l.condition = '' AND l.label IS NOT NULL
        """, [stage, dataset]).df()


def matrix_choices(db: str | Path) -> pd.DataFrame:
    """(stage, dataset) pairs with at least two raters, with rater and label counts."""
    with opened(db, read_only=True) as con:
        return con.execute("""
            SELECT i.stage, i.dataset, count(DISTINCT l.rater) AS raters, count(*) AS labels
            FROM labels l JOIN items i USING (item_id)
            WHERE l.condition = '' AND l.label IS NOT NULL
            GROUP BY ALL HAVING count(DISTINCT l.rater) >= 2 ORDER BY 1, 2
        """).df()


_DISAGREEMENT_SQL = f"""
    WITH {REFERENCE_SQL},
    cases AS (
        SELECT i.stage, i.dataset, i.user_id, i.prompt_index, i.attribute, i.item_id, l.rater AS judge,
               l.condition, l.label AS judge_label, r.human AS human_label, l.error, l.reason, l.raw
        FROM labels l JOIN items i USING (item_id) JOIN reference r USING (item_id)
        WHERE l.rater_kind IN ('llm', 'trained', 'baseline')
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
    with opened(db, read_only=True) as con:
        return int(con.execute(f"SELECT count(*) FROM ({_DISAGREEMENT_SQL})", _disagreement_params(f)).fetchall()[0][0])


def disagreements_page(db: str | Path, f: DisagreementFilter, *, limit: int = 50, offset: int = 0) -> pd.DataFrame:
    """One page of judge labels matching the filter, in a stable order (paged in SQL)."""
    with opened(db, read_only=True) as con:
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
    with opened(db, read_only=True) as con:
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
    with opened(db, read_only=True) as con:
        return con.execute("""
            SELECT r.run_id, r.kind, r.rater, r.status, r.started_at, r.finished_at, r.judge_version, r.git_sha,
                   r.source, coalesce(c.labels, 0) AS labels, coalesce(c.failures, 0) AS failures,
                   CAST(r.parameters AS TEXT) AS parameters
            FROM runs r LEFT JOIN (
                SELECT run_id, count(*) AS labels, count(*) FILTER (WHERE label IS NULL) AS failures
                FROM labels GROUP BY run_id
            ) c USING (run_id)
            ORDER BY r.started_at DESC, r.run_id
        """).df()


def compare_runs(db: str | Path, run_a: str, run_b: str) -> dict[str, Any]:
    """Compare the labels two runs wrote on the items both labelled.

    Returns:
        ``summary`` (one-row frame: labels of each run, shared items, agreeing items),
        ``crosstab`` (label of A x label of B counts) and ``differences`` (up to 200 differing items).
    """
    with opened(db, read_only=True) as con:
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
