"""Stage 3 (response judgment): do judges pick the answer the human preferred, and with what biases?

Library entry points (the CLI in :mod:`personagap.commands.response` is a thin layer over them):

* :func:`import_prism`, :func:`import_usr`, :func:`import_personafeedback` — validate a release
  and write it in one transaction;
* :func:`report_response` — read the store and build a :class:`ResponseReport`
  (:func:`response_report` is the pure part, :func:`render_response` the text view);
* :func:`judge_response` — build a judge's tasks from stored items and run it live.

The report is built in pieces: its records (:mod:`.response_records`), pairwise datasets
(:mod:`.response_pairwise`), single-response datasets (:mod:`.response_single`), the text view
(:mod:`.response_text`); this module reads the store, runs judges and puts the pieces together.

Datasets and what each is compared with:

* pairwise items (``prism-judge``, ``personafeedback``, the demo sample): each judge's A/B/tie
  against the human label (the PRISM participant's own preference; PersonaFeedback's chosen
  answer), with position and length bias for judges *and* humans, trivial baselines and the
  with-profile vs no-profile gap on shared items;
* single-response datasets (``usr-personachat``, any imported yes/no, k-category or ordinal one): one
  section per dataset, titled with the question its record stores (:mod:`personagap.datasets`), with
  rater-rater agreement on its scale, each judge against every rater and the rater majority, and the
  aspects its raters also rated (USR's Overall, Engaging, ...: stored at import as data, not code);
* Re-Centering generic-vs-personalised pairs: the share of personalised answers a judge rates
  no better than the generic one (the release holds no human rating of these pairs).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import duckdb
import pandas as pd

from personagap.analysis.aggregated import store_extras
from personagap.analysis.comparable import HUMAN_KINDS, JUDGE_KINDS
from personagap.analysis.origins import tag_and_compare
from personagap.analysis.pipeline_sql import reference_table
from personagap.analysis.weighting import Weight
from personagap.datasets import dataset_records
from personagap.human_data.labels import ASPECTS_PREFIX, parse_aspects
from personagap.human_data.personafeedback import load_personafeedback
from personagap.human_data.prism import ResponseImport, load_prism
from personagap.human_data.usr import load_usr
from personagap.records import DatasetRecord
from personagap.stages.response_pairwise import (
    PAIRWISE_SCALE,
    gvp_rows,
    pairwise_humans,
    pairwise_judges,
    profile_gap_note,
    profile_gaps,
)
from personagap.stages.response_records import (
    GVP_KIND,
    SINGLE_KINDS,
    GenericVsPersonalized,
    HumanBias,
    JudgeResult,
    ProfileGap,
    ResponseReport,
    SingleResponseReport,
)
from personagap.stages.response_single import inferred_record, legacy_usr, single_dataset
from personagap.stages.response_text import render_response
from personagap.store import StoreError, gc_paused, opened, write_batch
from personagap.store.aggregates import label_counts
from personagap.store.dataset_reads import dataset_origins, meta_with_prefix
from personagap.store.item_reads import response_items as load_items
from personagap.store.response_counts import (
    NO_PROFILE,
    REVERSED,
    datasets_of_kinds,
    gvp_counts,
    pair_human_counts,
    pair_human_raters,
    pair_judge_counts,
    profile_gap_counts,
    single_human_labels,
    single_judge_counts,
    single_label_values,
    single_rater_counts,
    single_reference_counts,
    staged,
    swap_counts,
)
from personagap.vocabulary import YES_NO, HumanSet

if TYPE_CHECKING:
    from personagap.judges.runner import LMConfig, RunSummary

__all__ = ["GVP_KIND", "HUMAN_KINDS", "JUDGE_KINDS", "ResponseReport", "import_personafeedback", "import_prism",
           "import_usr", "judge_response", "load_items", "render_response", "report_response",
           "response_report_from_store"]


# --------------------------------------------------------------------------- library API

def _import(result: ResponseImport, db: str | Path) -> ResponseImport:
    write_batch(db, result.batch)
    return result


@gc_paused()
def import_prism(path: str | Path, db: str | Path) -> ResponseImport:
    """Validate PRISM judge files (a file or folder) and write them to ``db`` in one transaction.

    Raises:
        personagap.human_data.DataError: A file deviates from the release format; nothing is written.
    """
    return _import(load_prism(path), db)


@gc_paused()
def import_usr(path: str | Path, db: str | Path) -> ResponseImport:
    """Validate the USR PersonaChat ratings and write them to ``db`` in one transaction."""
    return _import(load_usr(path), db)


@gc_paused()
def import_personafeedback(path: str | Path, db: str | Path) -> ResponseImport:
    """Validate a PersonaFeedback release folder and write it to ``db`` in one transaction."""
    return _import(load_personafeedback(path), db)


def report_response(db: str | Path, *, weight: Weight = "items", baseline: str = NO_PROFILE) -> ResponseReport:
    """Build the stage-3 report from a database (read-only), from DuckDB's aggregates (issue 20).

    Pairwise and generic-vs-personalised figures come from per-(dataset, judge, condition, user) sums
    (:mod:`personagap.store.response_counts`); the alternative-annotator test reads only items several humans
    labelled (:func:`~personagap.analysis.aggregated.store_extras`); single-response sections read the human labels
    of single-response items alone, their judges' figures come from counts too. Memory does not grow with the judge
    labels. ``weight``: what the judge rows' table figures weigh equally (``items``, the default, or ``users``).
    ``baseline``: the judge condition without the profile that the with/without-profile gap compares against
    (``--baseline-condition``, default ``no-profile``).
    """
    with opened(db, read_only=True) as con:
        origins = dataset_origins(con)
        records = {ds: r for (st, ds), r in dataset_records(con).items() if st == "response"}
        return response_report_from_store(con, origins=origins,
                                          records=records, weight=weight, baseline=baseline)


def response_report_from_store(con: duckdb.DuckDBPyConnection, *, origins: Mapping[str, str] | None = None,
                               records: Mapping[str, DatasetRecord], weight: Weight = "items",
                               baseline: str = NO_PROFILE) -> ResponseReport:
    """The stage-3 report from an open store.

    Args:
        con: An open (read-only is enough) store connection.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        records: Dataset -> its stage-3 record (:func:`personagap.datasets.dataset_records`): the scale every
            judge is scored over and the question a section is titled with. A single-response dataset missing
            from it is read the way the record reader infers one (nominal over the labels).
        weight: What the judge rows' table figures weigh equally (``items`` or ``users``).
        baseline: The judge condition without the profile (``baseline`` or ``baseline+suffix``) each other
            condition of the same judge is compared with: the with/without-profile gap.
    """
    with reference_table(con) as reference, staged(con, reference):
        counts, human_counts, gvp = pair_judge_counts(con), pair_human_counts(con), gvp_counts(con)
        human_raters = pair_human_raters(con)
        # The paired figures need both runs of a judge: without a reverse-order run or a baseline condition
        # there is nothing to pair, and no pass over the labels is made for it.
        conditions = {str(c) for c in counts["condition"].unique()}
        swaps = swap_counts(con) if any(c.endswith(REVERSED) for c in conditions) else None
        paired = any(c.split("+")[0] == baseline for c in conditions)
        gap_counts = profile_gap_counts(con, baseline) if paired else None
        single_datasets = datasets_of_kinds(con, SINGLE_KINDS)
        # Single-response datasets: the human labels per item (agreement among humans), every judge label counted.
        singles = _single_reads(con, single_datasets) if single_datasets else None
        with_single = set() if singles is None else {str(d) for d in singles.values["dataset"].unique()}
        with_pairs = {str(d) for frame in (counts, human_counts, human_raters, gvp) for d in frame["dataset"].unique()}
        datasets = sorted(with_pairs | with_single)
        # Yes/no datasets (the only ones whose human rate is estimated): every parsed label is yes or no, so none
        # of them is an A/B/tie verdict on a pair.
        binary = [] if singles is None else [
            d for d in sorted(with_single - with_pairs)
            if set(singles.values.loc[(singles.values["dataset"] == d) & singles.values["label"].notna(), "label"])
            <= set(YES_NO)]
        # The estimates read the counts of the yes/no datasets only: none, no count (one pass over the labels).
        counts_for_rates: dict[HumanSet, tuple[pd.DataFrame, pd.DataFrame]] = (
            {"blind": label_counts(con, "response", "blind", reference_table=reference)} if binary else {})
    if not datasets:
        return ResponseReport(judges=[], humans=[], profile_gaps=[], generic_vs_personalized=[], usr=None,
                              weight=weight)
    aspects = parse_aspects(meta_with_prefix(con, ASPECTS_PREFIX))
    judges: list[JudgeResult] = []
    humans: list[HumanBias] = []
    gaps: list[ProfileGap] = []
    gvp_results: list[GenericVsPersonalized] = []
    sections: list[SingleResponseReport] = []
    for dataset in datasets:
        judges += pairwise_judges(counts, swaps, dataset, scale=PAIRWISE_SCALE, weight=weight)
        humans += pairwise_humans(human_counts, human_raters, dataset, scale=PAIRWISE_SCALE)
        gaps += profile_gaps(gap_counts, counts, dataset) if gap_counts is not None else []
        gvp_results += gvp_rows(gvp, dataset)
        if singles is None or dataset not in with_single:
            continue
        record = records.get(dataset)
        single_record = record if record is not None and record.item_kind == "single" else inferred_record(
            dataset, singles.values)
        js, section = single_dataset(singles.humans[singles.humans["dataset"] == dataset], singles.judges,
                                     singles.raters, single_record, aspects.get(dataset, []),
                                     reference=singles.reference[singles.reference["dataset"] == dataset],
                                     weight=weight)
        judges += js
        sections += [section] if section is not None else []
    del singles  # the counts and human labels are no longer needed: freed before the alternative-annotator read
    # The test needs several humans per item (USR; PRISM rows say why not); the human rate is corrected for yes/no
    # datasets only (an A/B/tie preference has no single "positive" label).
    alt_test, estimates = store_extras(con, "response", datasets, positive="yes", counts=counts_for_rates,
                                       rate_datasets=binary, scales={ds: r.scale for ds, r in records.items()})
    out = ResponseReport(judges=judges, humans=humans, profile_gaps=gaps, generic_vs_personalized=gvp_results,
                         single_responses=sections, alt_test=alt_test, estimates=estimates, weight=weight,
                         baseline_condition=baseline, profile_gap_note=profile_gap_note(conditions, baseline, gaps))
    out.origin_comparison = tag_and_compare(out, origins or {}, lambda: ((j.judge, j) for j in out.judges))
    out.usr = legacy_usr(out.single_responses)
    return out


class _SingleReads(NamedTuple):
    """What the report reads of single-response items (:mod:`personagap.store.response_counts`).

    Every label's distinct values, the human labels one a row, the judges' labels and the reference as counts.
    """

    values: pd.DataFrame
    humans: pd.DataFrame
    judges: pd.DataFrame
    raters: pd.DataFrame
    reference: pd.DataFrame


def _single_reads(con: duckdb.DuckDBPyConnection, datasets: list[str]) -> _SingleReads:
    # Inside staged(): the counts read its items and their blind reference.
    judges = single_judge_counts(con, SINGLE_KINDS)
    # No judge label, no pass over the labels for the judges against each rater.
    raters = single_rater_counts(con, SINGLE_KINDS) if not judges.empty else judges.iloc[:0].assign(human_rater="")
    return _SingleReads(values=single_label_values(con, SINGLE_KINDS),
                        humans=single_human_labels(con, SINGLE_KINDS, datasets), judges=judges, raters=raters,
                        reference=single_reference_counts(con, SINGLE_KINDS))


def judge_response(db: str | Path, judge_name: str, lm: LMConfig, *, profile: bool = True,
                   datasets: tuple[str, ...] | None = None, concurrency: int = 8, limit: int | None = None,
                   seed: int = 0, both_orders: bool = False, max_retries: int = 4,
                   progress: bool = True) -> RunSummary:
    """Run a stage-3 judge live on the stored items and store its labels.

    Args:
        db: The DuckDB file.
        judge_name: 'pairwise' (every pairwise and generic-vs-personalised item) or
            'persona-use' (every persona-use item).
        lm: Model settings.
        profile: Show the user's profile (pairwise only).
        datasets: Judge only these datasets.
        concurrency: Calls in flight.
        limit: Judge only the first N tasks.
        seed: Seed of the pairwise position swap.
        both_orders: Also judge each pair in the opposite order (swap consistency).
        max_retries: Retries per call on 429/5xx/timeouts.
        progress: Progress bar on stderr.

    Returns:
        The runner's summary.

    Raises:
        ValueError: Unknown judge, or --no-profile with persona-use (the caller's mistake).
        personagap.store.StoreError: The store holds no item this judge can judge.
    """
    from personagap.judges.base import get_judge
    from personagap.judges.response import pairwise_tasks, persona_use_tasks
    from personagap.judges.runner import run_judge

    judge = get_judge(judge_name)
    if judge.stage != "response":
        raise ValueError(f"judge {judge_name!r} is a {judge.stage} judge, not a response judge")
    with opened(db, read_only=True) as con:
        items = load_items(con)
    if datasets:
        items = items[items["dataset"].isin(datasets)]
    if judge_name == "persona-use":
        if not profile:
            raise ValueError("persona-use judges whether a response uses the persona: it needs the persona")
        tasks = persona_use_tasks(items[items["kind"] == "persona_use"])
    else:
        tasks = pairwise_tasks(items[items["kind"].isin(["pairwise", GVP_KIND])], profile=profile, seed=seed,
                               both_orders=both_orders)
    if not tasks:
        # The store holds nothing this judge can be asked about: the user's data, not a bug (one line, exit 2).
        needs = " with a profile (or pass --no-profile)" if judge_name != "persona-use" and profile else ""
        raise StoreError(f"{db}: no stored items{needs} for judge {judge_name!r}; import a release first")
    return run_judge(db, judge, tasks, lm, concurrency=concurrency, limit=limit, progress=progress,
                     max_retries=max_retries, source=",".join(sorted(set(items["dataset"]))) or "response", seed=seed)


# --------------------------------------------------------------------------- rendering


