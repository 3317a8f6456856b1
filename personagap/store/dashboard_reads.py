"""The SQL behind the dashboard's pages (issue 31: SQL only in the store); each function reads one open connection.

The dashboard (:mod:`personagap.dashboard.queries`) opens the store read-only for one short batch of these reads
and closes it again (a judge run may write between two batches). Every filter is a bound parameter and the SQL text
is static: optional filters use the ``(? IS NULL OR col = ?)`` form instead of being appended as strings. Which
labels count is :mod:`personagap.analysis.comparable`'s rule. Most reads are aggregates per (dataset, rater,
condition, user, ...) or one page of rows. The pages read counts (:func:`bias_counts`, :func:`agreement_counts`);
the per-label :func:`bias_labels` and :func:`agreement_labels` stay for tests (their per-label oracles).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import duckdb
import pandas as pd

from personagap.analysis.comparable import blind_human_sql, comparable_judge_sql, judge_display_sql, reference_sql

REFERENCE_SQL = reference_sql("blind")
"""Per item, the blind human reference (``reference(item_id, human)``): what the diagnosis compares with."""

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


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
    return cast(pd.DataFrame, con.execute(sql, params or []).df())


def db_state(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Row counts of the main tables (all zero for a fresh store)."""
    row = con.execute("""
        SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM labels), (SELECT count(*) FROM runs),
               (SELECT count(*) FROM users)
    """).fetchall()[0]
    return {"items": int(row[0]), "labels": int(row[1]), "runs": int(row[2]), "users": int(row[3])}


def filter_options(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Distinct stages, datasets and judges present, for filter widgets."""
    stages = [str(r[0]) for r in con.execute("SELECT DISTINCT stage FROM items ORDER BY 1").fetchall()]
    datasets = [str(r[0]) for r in con.execute("SELECT DISTINCT dataset FROM items ORDER BY 1").fetchall()]
    judges = [str(r[0]) for r in con.execute(
        f"SELECT DISTINCT rater FROM labels l WHERE {comparable_judge_sql('l')} ORDER BY 1"
    ).fetchall()]
    return {"stage": stages, "dataset": datasets, "judge": judges}


def stage_inventory(con: duckdb.DuckDBPyConnection, stage: str) -> pd.DataFrame:
    """Labels of one stage counted per dataset, rater kind, rater and condition (with failures and users)."""
    return _frame(con, """
        SELECT i.dataset, l.rater_kind, l.rater, l.condition, count(*) AS labels,
               count(*) FILTER (WHERE l.label IS NULL) AS failures, count(DISTINCT i.user_id) AS users
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = ?
        GROUP BY ALL ORDER BY 1, 2, 3, 4
    """, [stage])


def bias_labels(con: duckdb.DuckDBPyConnection, stage: str) -> pd.DataFrame:
    """Yes/no labels of every comparable judge and the blind human reference, with position and length.

    Rows: ``rater``, ``who`` ('humans' | 'judge'), ``user_id``, ``position`` (the attribute's place in its list,
    where the release keys by it), ``length`` (characters of the attribute) and ``hit`` (1 = yes). One row per
    label: :func:`bias_counts` holds the same rows counted.
    """
    return _frame(con, f"WITH {REFERENCE_SQL} {_BIAS_ROWS}", [stage, stage])


def bias_counts(con: duckdb.DuckDBPyConnection, stage: str) -> pd.DataFrame:
    """:func:`bias_labels`' rows counted per (rater, who, user, position, length, hit): column ``n``."""
    return _frame(con, f"WITH {REFERENCE_SQL}, bias AS ({_BIAS_ROWS}) SELECT *, count(*) AS n FROM bias GROUP BY ALL",
                  [stage, stage])


_BIAS_ROWS = f"""
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
"""


def panel_reference(con: duckdb.DuckDBPyConnection, stage: str) -> pd.DataFrame:
    """Per ``dataset``, ``user_id`` and blind reference label ``human``: the count ``n`` of the stage's items."""
    return _frame(con, f"""
        WITH {REFERENCE_SQL}
        SELECT i.dataset, i.user_id, r.human, count(*) AS n
        FROM reference r JOIN items i USING (item_id)
        WHERE i.stage = ?
        GROUP BY ALL
    """, [stage])


def panel_pair_counts(con: duckdb.DuckDBPyConnection, stage: str, datasets: list[str]) -> pd.DataFrame:
    """Per judge (rater, rater_kind, condition), user, reference label and judge label: the count of items.

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``human``, ``label``, ``n``.
    """
    return _frame(con, f"""
        WITH {REFERENCE_SQL}
        SELECT i.dataset, l.rater, l.rater_kind, l.condition, i.user_id, r.human, l.label, count(*) AS n
        FROM labels l JOIN reference r USING (item_id) JOIN items i USING (item_id)
        WHERE i.stage = ? AND list_contains(?, i.dataset) AND {comparable_judge_sql('l')}
          AND l.label IS NOT NULL
        GROUP BY ALL
    """, [stage, list(datasets)])


# Raters of the agreement matrix (comparable.py's rule): blind humans, and every comparable judge label,
# a judge under a non-default condition shown as its own rater ("gpt [no-profile]").
_MATRIX_RATERS = f"""
    SELECT l.item_id, l.rater_kind, l.label, i.stage, i.dataset, i.user_id,
           {judge_display_sql('l')} AS rater
    FROM labels l JOIN items i USING (item_id)
    WHERE l.label IS NOT NULL AND ({blind_human_sql('l')} OR {comparable_judge_sql('l')})
"""


def agreement_labels(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> pd.DataFrame:
    """Long labels (item_id, rater, rater_kind, label, cluster) of one dataset for the pairwise matrix.

    Blind human labels and comparable judge labels only; failures are never verdicts.
    """
    return _frame(con, f"""
        SELECT item_id, rater, rater_kind, label, user_id AS cluster FROM ({_MATRIX_RATERS})
        WHERE stage = ? AND dataset = ?
    """, [stage, dataset])


@dataclass(frozen=True)
class AgreementCounts:
    """:func:`agreement_labels`' labels counted for the pairwise matrix (:func:`agreement_counts`)."""

    raters: pd.DataFrame
    """``rater``, ``rater_kind`` (one row per distinct pair, sorted) and ``items`` (the items the rater labelled)."""
    pairs: pd.DataFrame
    """Per (``rater_a`` < ``rater_b``, ``user_id``, ``label_a``, ``label_b``): ``n``, the items both labelled."""
    users: list[str]
    """Every user with a labelled item, sorted."""
    categories: list[str]
    """Every label given, sorted."""


def agreement_counts(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, *,
                     mask_bits: int = 64) -> AgreementCounts:
    """:func:`agreement_labels` of one dataset counted per (rater pair, user, label pair), never a row per label.

    One label per (item, rater) (the smallest where a rater labelled an item twice). Rows grow with rater pairs x
    users x label pairs, not with labels. ``mask_bits``: the most (rater, label) codes a bit-mask pattern holds.
    """
    params: dict[str, Any] = {"stage": stage, "dataset": dataset}
    dictionary = _frame(con, f"SELECT DISTINCT rater, rater_kind, label FROM ({_MATRIX_RATERS}) "
                             "WHERE stage = ? AND dataset = ?", [stage, dataset])
    names, labels = sorted(set(dictionary["rater"])), sorted(set(dictionary["label"]))
    # Each item's set of (rater, label) is its pattern; items are counted per (user, pattern) in one pass over the
    # labels, and only the few distinct patterns are expanded into raters and rater pairs. A pattern is a bit mask
    # of (rater, label) codes where they fit in 64 bits, else a sorted list.
    if len(names) * len(labels) <= min(mask_bits, 64):
        params |= {"raters": names, "labels": labels, "k": len(labels)}
        pattern = ("bit_or(CAST(1 AS UBIGINT) << CAST((list_position($raters, rater) - 1) * $k "
                   "+ list_position($labels, label) - 1 AS UBIGINT))")
        entries = """
            SELECT pattern, {'r': list_extract($raters, c // $k + 1), 'l': list_extract($labels, c % $k + 1)} AS x
            FROM (SELECT pattern, unnest(range(64)) AS c FROM (SELECT DISTINCT pattern FROM pg_matrix_counted))
            WHERE (pattern >> CAST(c AS UBIGINT)) & CAST(1 AS UBIGINT) = 1
        """
    else:
        pattern = "list_sort(list({'r': rater, 'l': label}))"
        entries = "SELECT pattern, unnest(pattern) AS x FROM (SELECT DISTINCT pattern FROM pg_matrix_counted)"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE pg_matrix_counted AS
        WITH per_item AS (
            SELECT any_value(user_id) AS user_id, {pattern} AS pattern
            FROM ({_MATRIX_RATERS}) WHERE stage = $stage AND dataset = $dataset GROUP BY item_id
        )
        SELECT user_id, pattern, count(*) AS n FROM per_item GROUP BY ALL
    """, params)
    used = {k: v for k, v in params.items() if k in ("raters", "labels", "k")}
    voted = f"""
        WITH entries AS ({entries}),
        voted AS (SELECT pattern, x.r AS rater, min(x.l) AS label FROM entries GROUP BY ALL)
    """
    try:
        items = cast(pd.DataFrame, con.execute(voted + """
            SELECT v.rater, CAST(sum(c.n) AS BIGINT) AS items
            FROM pg_matrix_counted c JOIN voted v USING (pattern) GROUP BY 1
        """, used).df())
        raters = (dictionary[["rater", "rater_kind"]].drop_duplicates().merge(items, on="rater")
                  .sort_values(["rater", "rater_kind"], ignore_index=True))
        pairs = cast(pd.DataFrame, con.execute(voted + """,
            pair AS (SELECT a.pattern, a.rater AS rater_a, b.rater AS rater_b, a.label AS label_a, b.label AS label_b
                     FROM voted a JOIN voted b ON a.pattern = b.pattern AND a.rater < b.rater)
            SELECT p.rater_a, p.rater_b, c.user_id, p.label_a, p.label_b, CAST(sum(c.n) AS BIGINT) AS n
            FROM pg_matrix_counted c JOIN pair p USING (pattern)
            GROUP BY ALL ORDER BY ALL
        """, used).df())
        users = [str(r[0]) for r in con.execute(
            "SELECT DISTINCT user_id FROM pg_matrix_counted ORDER BY 1").fetchall()]
        categories = [str(r[0]) for r in con.execute(voted + "SELECT DISTINCT label FROM voted ORDER BY 1",
                                                      used).fetchall()]
    finally:
        con.execute("DROP TABLE IF EXISTS pg_matrix_counted")
    return AgreementCounts(raters=raters, pairs=pairs, users=users, categories=categories)


def human_rater_counts(con: duckdb.DuckDBPyConnection, stage: str) -> dict[str, int]:
    """Dataset -> distinct individual human raters (kind ``human``) with a parsed label, for datasets with any.

    A cheap check before the pilot's agreement among raters, which needs two such raters and reads every label.
    """
    return {str(r[0]): int(r[1]) for r in con.execute(
        "SELECT i.dataset, count(DISTINCT l.rater) FROM labels l JOIN items i USING (item_id) "
        "WHERE i.stage = ? AND l.rater_kind = 'human' AND l.label IS NOT NULL GROUP BY 1 ORDER BY 1",
        [stage]).fetchall()}


def matrix_choices(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """(stage, dataset) pairs with at least two raters, with rater and label counts."""
    # Labels counted per (stage, dataset, rater, condition) first; the display names of those few rows after.
    return _frame(con, f"""
        WITH per AS (
            SELECT i.stage, i.dataset, l.rater, l.condition, count(*) AS n
            FROM labels l JOIN items i USING (item_id)
            WHERE l.label IS NOT NULL AND ({blind_human_sql('l')} OR {comparable_judge_sql('l')})
            GROUP BY ALL
        )
        SELECT stage, dataset, count(DISTINCT {judge_display_sql('per')}) AS raters, CAST(sum(n) AS BIGINT) AS labels
        FROM per
        GROUP BY ALL HAVING count(DISTINCT {judge_display_sql('per')}) >= 2 ORDER BY 1, 2
    """)


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


def count_disagreements(con: duckdb.DuckDBPyConnection, f: DisagreementFilter) -> int:
    """Number of judge labels matching the filter."""
    return int(con.execute(f"SELECT count(*) FROM ({_DISAGREEMENT_SQL})", _disagreement_params(f)).fetchall()[0][0])


def disagreements_page(con: duckdb.DuckDBPyConnection, f: DisagreementFilter, *, limit: int = 50,
                       offset: int = 0) -> pd.DataFrame:
    """One page of judge labels matching the filter, in a stable order (paged in SQL)."""
    return _frame(con,
                  f"SELECT * FROM ({_DISAGREEMENT_SQL}) "
                  "ORDER BY stage, dataset, user_id, prompt_index, attribute, item_id, judge, condition "
                  "LIMIT ? OFFSET ?",
                  [*_disagreement_params(f), int(limit), int(offset)])


@dataclass(frozen=True)
class CaseRows:
    """What the store holds about one item (:func:`case_rows`); payload still JSON text."""

    item: dict[str, Any]
    prompt_text: str | None
    profile_text: str | None
    profile: pd.DataFrame
    labels: pd.DataFrame


def case_rows(con: duckdb.DuckDBPyConnection, item_id: str) -> CaseRows | None:
    """The item, its prompt, the user's profile and every label on it; None when the item does not exist."""
    items = _frame(con, "SELECT * FROM items WHERE item_id = ?", [item_id])
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
    profile = _frame(con, """
        SELECT dataset, attribute, reason, confidence FROM attributes
        WHERE user_id = ? AND dataset = coalesce(
            (SELECT any_value(dataset) FROM attributes WHERE user_id = ? AND dataset = ?),
            (SELECT min(dataset) FROM attributes WHERE user_id = ?))
        ORDER BY attribute
    """, [user, user, ds, user])
    profile_text = con.execute("SELECT profile_text FROM users WHERE user_id = ? ORDER BY dataset = ? DESC LIMIT 1",
                               [user, ds]).fetchall()
    labels = _frame(con, """
        SELECT rater, rater_kind, condition, label, error, reason, raw, run_id, meta FROM labels
        WHERE item_id = ?
        ORDER BY CASE rater_kind WHEN 'human_majority' THEN 0 WHEN 'human' THEN 1 ELSE 2 END, rater, condition
    """, [item_id])
    return CaseRows(item=item, prompt_text=prompt[0][0] if prompt else None,
                    profile_text=profile_text[0][0] if profile_text else None, profile=profile, labels=labels)


def runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every run with how many labels it wrote (its stored status), newest first."""
    return _frame(con, """
        SELECT r.run_id, r.kind, r.rater, r.status, r.started_at, r.finished_at, r.judge_version, r.git_sha,
               r.source, coalesce(c.labels, 0) AS labels, coalesce(c.failures, 0) AS failures,
               CAST(r.parameters AS TEXT) AS parameters
        FROM runs r LEFT JOIN (
            SELECT run_id, count(*) AS labels, count(*) FILTER (WHERE label IS NULL) AS failures
            FROM labels GROUP BY run_id
        ) c USING (run_id)
        ORDER BY r.started_at DESC, r.run_id
    """)


def best_run_pair(con: duckdb.DuckDBPyConnection) -> tuple[str, str] | None:
    """The two runs that labelled the most items in common (the Runs page's default comparison)."""
    rows = con.execute("""
        WITH r AS (SELECT DISTINCT run_id, item_id FROM labels)
        SELECT a.run_id, b.run_id, count(*) AS shared
        FROM r a JOIN r b ON a.item_id = b.item_id AND a.run_id < b.run_id
        GROUP BY ALL ORDER BY shared DESC, 1, 2 LIMIT 1
    """).fetchall()
    return (str(rows[0][0]), str(rows[0][1])) if rows else None


_SHARED_SQL = """
    WITH a AS (SELECT item_id, condition, label FROM labels WHERE run_id = ?),
         b AS (SELECT item_id, condition, label FROM labels WHERE run_id = ?),
         s AS (SELECT a.item_id, a.condition, a.label AS label_a, b.label AS label_b
               FROM a JOIN b USING (item_id, condition))
"""


def compare_runs(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> dict[str, pd.DataFrame]:
    """Compare the labels two runs wrote on the items both labelled.

    Returns:
        ``summary`` (one-row frame: labels of each run, shared items, agreeing items),
        ``crosstab`` (label of A x label of B counts) and ``differences`` (up to 200 differing items).
    """
    params = [run_a, run_b]
    summary = _frame(con, _SHARED_SQL + """
        SELECT (SELECT count(*) FROM a) AS labels_a, (SELECT count(*) FROM b) AS labels_b,
               count(*) AS shared, count(*) FILTER (WHERE label_a IS NOT DISTINCT FROM label_b) AS agree
        FROM s
    """, params)
    crosstab = _frame(con, _SHARED_SQL + """
        SELECT coalesce(label_a, '(failed)') AS label_a, coalesce(label_b, '(failed)') AS label_b, count(*) AS n
        FROM s GROUP BY ALL ORDER BY 1, 2
    """, params)
    differences = _frame(con, _SHARED_SQL + """
        SELECT i.stage, i.dataset, i.user_id, i.prompt_index, i.attribute, s.item_id, s.label_a, s.label_b
        FROM s JOIN items i USING (item_id)
        WHERE s.label_a IS DISTINCT FROM s.label_b
        ORDER BY i.dataset, i.user_id, i.prompt_index, i.attribute LIMIT 200
    """, params)
    return {"summary": summary, "crosstab": crosstab, "differences": differences}
