"""Optimise a judge's DSPy program toward agreement with humans, and measure it on users it never saw.

MLflow-style judge alignment optimises exact-match agreement: at a 19% human yes-rate that rewards a judge
saying "no" to everything. Here (issue 16):

* **Users, never items, are split** into train / dev / test with a recorded seed
  (:func:`split_users`): no user's items are on two sides.
* The optimiser (DSPy's BootstrapFewShot, MIPROv2 or SIMBA) sees **train only**, scored per example by a
  **class-balanced** metric (:func:`balanced_metric`: a correct answer on class ``c`` is worth
  ``n / (K * n_c)`` with the counts from the humans on train), so both classes weigh the same.
* Candidates (the unoptimised program included) are **selected on dev** by a corpus-level metric (kappa,
  Gwet's AC1 or balanced accuracy) -- never by a per-example average, and never on test.
* Before/after figures come from **test users only**: kappa, AC1 and over-selection (yes/no judges) or
  accuracy (the pairwise judge), each with the one CI rule's user-clustered interval (none below
  ``MIN_USERS_FOR_CI`` users), and the CI of the *difference* paired over the same users (each user left out of
  both programs' figures at once).
* **Pairwise** items are shown in a seeded A/B order (``pairwise_tasks``): demos carry the human's label in
  the order shown, the parser maps every verdict back, and an answer the adapter cannot split is a
  failure (never a label, never a crash of the optimiser).
* **Cost**: every LLM call goes through :class:`MeteredLM`, which counts real HTTP calls, answers repeats
  from a cache (kept in the database's ``judge_cache``), and stops the optimiser at ``--budget`` calls.

The program is saved in DSPy's own format (``program.save(path)``, a JSON state with its instructions and
demos) plus a sidecar ``PATH.meta.json`` (:func:`sidecar_path`) with the base judge, optimiser, metric, split
seed and user ids, data fingerprint and scores. :func:`program_judge` turns a saved program into a judge
version of its own (the base judge's name plus the program's content hash); :func:`program_tasks` marks its
labels on the program's own train/dev users as :data:`~personagap.analysis.comparable.IN_SAMPLE`.

Modules: :mod:`.data` (examples, user split, class set), :mod:`.metered` (the metered LM and the answer cache),
:mod:`.scoring` (metric, evaluation, comparison), :mod:`.report` (settings, plan, result), :mod:`.search` (the run)
and :mod:`.program_io` (saving, loading and judging with a program). This package re-exports their public names.
"""

from __future__ import annotations

from personagap.judges.optimize.data import (
    DEFAULT_FRACTIONS,
    BudgetExhausted,
    Example,
    OptimizeError,
    UserSplit,
    base_name,
    data_fingerprint,
    dataset_classes,
    human_reference,
    load_examples,
    split_users,
)
from personagap.judges.optimize.metered import ANSWER_KEY_ARG, Meter, MeteredLM, judge_adapter, load_cache, save_cache
from personagap.judges.optimize.program_io import (
    SIDECAR_FORMAT,
    SIDECAR_VERSION,
    ProgramJudge,
    SavedProgram,
    judge_with_program,
    load_program,
    program_judge,
    program_tasks,
    save_program,
)
from personagap.judges.optimize.report import (
    OPTIMIZERS,
    REPORTED,
    STAGE_JUDGES,
    OptimizeResult,
    OptimizerName,
    OptimizeSettings,
    Plan,
    reported_metrics,
    sidecar_path,
)
from personagap.judges.optimize.scoring import (
    SELECTION_METRICS,
    Comparison,
    Evaluation,
    SelectionMetric,
    balanced_metric,
    class_weights,
    compare,
    corpus_score,
    evaluate,
    program_demos,
    program_id,
    program_instructions,
    read_label,
    table_metric,
    to_dspy,
    user_tables,
)
from personagap.judges.optimize.search import optimize, plan_run

__all__ = [
    "ANSWER_KEY_ARG",
    "BudgetExhausted",
    "Comparison",
    "DEFAULT_FRACTIONS",
    "Evaluation",
    "Example",
    "Meter",
    "MeteredLM",
    "OPTIMIZERS",
    "OptimizeError",
    "OptimizeResult",
    "OptimizeSettings",
    "OptimizerName",
    "Plan",
    "ProgramJudge",
    "REPORTED",
    "SELECTION_METRICS",
    "SIDECAR_FORMAT",
    "SIDECAR_VERSION",
    "STAGE_JUDGES",
    "SavedProgram",
    "SelectionMetric",
    "UserSplit",
    "balanced_metric",
    "base_name",
    "class_weights",
    "compare",
    "corpus_score",
    "data_fingerprint",
    "dataset_classes",
    "evaluate",
    "human_reference",
    "judge_adapter",
    "judge_with_program",
    "load_cache",
    "load_examples",
    "load_program",
    "optimize",
    "plan_run",
    "program_demos",
    "program_id",
    "program_instructions",
    "program_judge",
    "program_tasks",
    "read_label",
    "reported_metrics",
    "save_cache",
    "save_program",
    "sidecar_path",
    "split_users",
    "table_metric",
    "to_dspy",
    "user_tables",
]
