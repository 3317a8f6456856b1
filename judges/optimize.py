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
  accuracy (the pairwise judge), each with the user-clustered bootstrap CI (none below 5 users), and the
  CI of the *difference* from a paired bootstrap (the same user resamples for both programs).
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
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import dspy
import numpy as np
import pandas as pd
from dspy.utils.exceptions import AdapterParseError

from personagap.analysis.agreement import (
    DEFAULT_RESAMPLES,
    METRICS,
    MIN_USERS_FOR_CI,
    Estimate,
    FloatArray,
    bootstrap_estimate,
    bootstrap_tables,
    indexed_tables,
    resample_weights,
)
from personagap.analysis.comparable import IN_SAMPLE, blind_human_sql, reference_labels
from personagap.datasets import dataset_records
from personagap.judges.base import Judge, JudgeTask, Program, Verdict, describe_fit, fits, get_judge
from personagap.judges.runner import (
    LMConfig,
    TokenPrices,
    answer_key,
    prompt_identity,
    response_format_for,
    token_prices,
)
from personagap.store import StoreError, git_sha, now, opened, upsert

OptimizerName = Literal["bootstrap-fewshot", "mipro", "simba"]
SelectionMetric = Literal["kappa", "ac1", "balanced-accuracy"]
OPTIMIZERS: tuple[str, ...] = ("bootstrap-fewshot", "mipro", "simba")
SELECTION_METRICS: tuple[str, ...] = ("kappa", "ac1", "balanced-accuracy")
STAGE_JUDGES: dict[str, tuple[str, ...]] = {"relevance": ("relevance-per-attribute",),
                                            "response": ("pairwise", "persona-use")}
"""Judges that can be optimised: one target item per call (a batched call has no per-item demo)."""
REPORTED = ("kappa", "ac1", "accuracy", "over_selection")
"""Figures reported before/after on test users: over-selection for yes/no judges only, accuracy for the
pairwise judge only (PRISM's own figure; at a skewed yes/no prevalence it rewards always-"no")."""
SIDECAR_FORMAT = "personagap-optimized-judge"
SIDECAR_VERSION = 1
DEFAULT_FRACTIONS = (0.5, 0.25, 0.25)

# The output field that carries each judge's label, and how a label is spelt there.
_LABEL_FIELD: dict[str, tuple[str, dict[str, str]]] = {
    "relevance-per-attribute": ("answer", {"yes": "YES", "no": "NO"}),
    "persona-use": ("uses_persona", {"yes": "yes", "no": "no"}),
    "pairwise": ("verdict", {"A": "A", "B": "B", "tie": "tie"}),
}
class OptimizeError(ValueError):
    """A request that cannot be run as asked (unknown judge, too few users, a bad program file)."""


class BudgetExhausted(RuntimeError):
    """The optimiser reached ``--budget`` LLM calls; no further call is sent."""


# --------------------------------------------------------------------------- data

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
    """The human label of each item: :func:`~personagap.analysis.comparable.reference_labels` (the one rule).

    Items whose humans tie have none; only blind human labels count (the rule's own filter; the query keeps
    just those rows so the frame stays small).
    """
    with opened(db, read_only=True) as con:
        labels = con.execute(f"""
            SELECT l.item_id, l.rater, l.rater_kind, l.condition, l.label FROM labels l
            WHERE {blind_human_sql('l')} AND l.item_id IN (SELECT unnest(?))
        """, [list(item_ids)]).df()
    return {str(item): str(label) for item, label in reference_labels(labels).items()}


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
    from personagap.api import relevance_items
    from personagap.judges.relevance import relevance_tasks
    from personagap.judges.response import pairwise_tasks, persona_use_tasks
    from personagap.stages.response import GVP_KIND, load_items

    datasets = datasets or _default_datasets(judge)
    if base_name(judge) == "relevance-per-attribute":
        items = relevance_items(db, datasets or ())
        tasks = relevance_tasks(judge, items)
    else:
        with opened(db, read_only=True) as con:
            items = load_items(con)
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


# --------------------------------------------------------------------------- the metered LM

@dataclass
class Meter:
    """Calls, cache hits, tokens and cost of one optimisation run, shared by every copy of the LM.

    ``budget`` caps the calls made while ``phase == 'optimise'``; evaluation phases are capped by the plan.
    """

    budget: int | None
    prices: TokenPrices | None
    cache: dict[str, dict[str, Any]] = field(default_factory=dict)
    new_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    phase: str = "optimise"
    calls: dict[str, int] = field(default_factory=dict)
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    exhausted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __deepcopy__(self, memo: dict[int, Any]) -> Meter:
        return self  # DSPy deep-copies LMs (lm.copy, program.deepcopy): every copy keeps counting here

    @property
    def total_calls(self) -> int:
        """HTTP calls sent in every phase."""
        return sum(self.calls.values())

    def reserve(self) -> None:
        """Count one HTTP call about to be sent, or raise :class:`BudgetExhausted`."""
        with self.lock:
            used = self.calls.get(self.phase, 0)
            if self.phase == "optimise" and self.budget is not None and used >= self.budget:
                self.exhausted = True
                raise BudgetExhausted(f"optimiser budget of {self.budget} LLM calls used up")
            self.calls[self.phase] = used + 1

    def lookup(self, key: str | None) -> dict[str, Any] | None:
        """The cached answer under ``key`` (counted as a cache hit), or None."""
        if key is None:
            return None
        with self.lock:
            hit = self.cache.get(key)
            if hit is not None:
                self.cache_hits += 1
        return hit

    def keep(self, key: str, entry: dict[str, Any]) -> None:
        """Cache a fresh answer for this run, and for the store unless :meth:`unusable` drops it."""
        with self.lock:
            self.cache[key] = entry
            self.new_entries[key] = entry

    def unusable(self, key: str) -> None:
        """An answer the judge could not read: never stored, so a later run asks again (as the runner does).

        It stays answerable within this run: the same request at the same settings would get it again.
        """
        with self.lock:
            self.new_entries.pop(key, None)

    def record(self, usage: Mapping[str, Any] | None) -> None:
        """Add one answer's token usage (and its estimated cost when the model's prices are known)."""
        if not usage:
            return
        p, c = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        with self.lock:
            self.prompt_tokens += p
            self.completion_tokens += c
            if self.prices is not None:
                self.cost = (self.cost or 0.0) + self.prices.cost(p, c)


class MeteredLM(dspy.BaseLM):  # type: ignore[misc]  # dspy ships no type information
    """A DSPy LM that sends each distinct request once, counts it, and refuses calls beyond the budget.

    Repeats (same model, messages and request parameters) are answered from :attr:`Meter.cache`; only the
    rest reach the provider, through a plain ``dspy.LM`` with DSPy's own cache off so that every call it
    makes is a real HTTP call.
    """

    def __init__(self, lm: LMConfig, meter: Meter) -> None:
        super().__init__(model=lm.model, cache=False, temperature=lm.temperature, max_tokens=lm.max_tokens)
        self.config = lm
        self.meter = meter
        self.inner = dspy.LM(lm.model, api_base=lm.api_base, api_key=lm.api_key(), cache=False, num_retries=3,
                             timeout=lm.timeout, temperature=lm.temperature, max_tokens=lm.max_tokens)

    def forward(self, prompt: str | None = None, messages: list[dict[str, Any]] | None = None,
                **kwargs: Any) -> Any:
        """One chat completion: from the cache, or counted and sent.

        Only calls that carry an :data:`ANSWER_KEY_ARG` (every call made through :func:`judge_adapter`) are
        cached: the key is the runner's (:func:`~personagap.judges.runner.prompt_identity`), so answers a
        ``judge`` run stored are reused here and the other way round.
        """
        key = kwargs.pop(ANSWER_KEY_ARG, None)
        request = {**self.kwargs, **kwargs}
        hit = self.meter.lookup(key)
        if hit is not None:
            return _response(hit["raw"], self.model)
        self.meter.reserve()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # DSPy's notice about messages=
            response = self.inner.forward(messages=messages or [{"role": "user", "content": prompt}],
                                          **{k: v for k, v in request.items()
                                             if k not in ("temperature", "max_tokens")},
                                          temperature=request.get("temperature"),
                                          max_tokens=request.get("max_tokens"))
        text = getattr(response.choices[0].message, "content", None) or ""
        usage = _usage(getattr(response, "usage", None))
        self.meter.record(usage)
        if key is not None:
            self.meter.keep(key, {"raw": text, "usage": usage})
        return response


ANSWER_KEY_ARG = "personagap_answer_key"
"""The LM call argument by which :func:`judge_adapter` hands :class:`MeteredLM` the request's cache key
(removed before the request is sent)."""


def _usage(usage: Any) -> dict[str, int] | None:
    if usage is None:
        return None
    def get(name: str) -> int:
        value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
        return int(value or 0)

    return {"prompt_tokens": get("prompt_tokens"), "completion_tokens": get("completion_tokens")}


def _response(text: str, model: str) -> Any:
    """An OpenAI-shaped response for a cached answer (no usage: it cost nothing this time)."""
    import litellm

    return litellm.ModelResponse(choices=[{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": text}}],
                                 usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}, model=model)


_CACHE_ROWS_SQL = "FROM judge_cache WHERE model = ? AND (judge = ? OR starts_with(judge, ?)) AND raw IS NOT NULL"
"""``judge_cache`` rows a run of a judge may reuse: the same model, the base judge's or any of its programs'
(``base@program``) rows, written by ``judge`` runs or earlier optimisations alike (one key scheme)."""


def load_cache(db: str | Path, judge: Judge, model: str) -> dict[str, dict[str, Any]]:
    """Stored answers of this judge (and its programs) and model, by the runner's cache key."""
    name = base_name(judge)
    with opened(db, read_only=True) as con:
        rows = con.execute(f"SELECT key, raw {_CACHE_ROWS_SQL}", [model, name, f"{name}@"]).fetchall()
    return {str(k): {"raw": str(r), "usage": None} for k, r in rows}


def save_cache(db: str | Path, judge: Judge, model: str, entries: Mapping[str, Mapping[str, Any]]) -> None:
    """Store new answers in ``judge_cache`` (one transaction) so no later run, judge or optimize, pays twice."""
    if not entries:
        return
    rows = [{"key": k, "judge": base_name(judge), "judge_version": judge.version, "model": model, "label": None,
             "raw": e["raw"], "reason": None, "error": None, "usage": e.get("usage"), "created_at": now()}
            for k, e in entries.items()]
    with opened(db) as con:
        upsert(con, "judge_cache", rows)


# --------------------------------------------------------------------------- programs

def judge_adapter(judge: Judge, lm: LMConfig) -> dspy.Adapter:
    """The adapter the runner uses (same prompt format), sending the judge's schema when ``lm.structured``.

    Only calls of the judge's own signature get the schema; an optimiser's other calls (instruction
    proposals) go out plain. No JSON fallback: one call per prediction, as in the runner.
    """
    base: type[dspy.Adapter] = dspy.JSONAdapter if lm.adapter == "json" else dspy.ChatAdapter
    wanted = judge.response_format()
    outputs = set(judge.signature.output_fields)

    class _JudgeAdapter(base):  # type: ignore[misc,valid-type]
        def _with_format(self, signature: Any, lm_kwargs: dict[str, Any]) -> dict[str, Any]:
            if lm.structured != "off" and wanted is not None and set(signature.output_fields) == outputs:
                return {**lm_kwargs, "response_format": response_format_for(lm.structured, wanted)}
            return lm_kwargs

        def __call__(self, model: Any, lm_kwargs: dict[str, Any], signature: Any, demos: Any, inputs: Any) -> Any:
            kwargs = self._with_format(signature, lm_kwargs)
            key = _answer_key(lm, signature, demos, inputs, kwargs)
            ours = set(signature.output_fields) == outputs
            try:
                found = super().__call__(model, {**kwargs, ANSWER_KEY_ARG: key}, signature, demos, inputs)
            except AdapterParseError:
                if not ours:
                    raise
                # An answer the adapter cannot split (PRISM's judges wrote a bare "[") is the judge's failure:
                # every output field empty, which its parser records as unparseable and the optimiser's metric
                # scores 0. Raised instead, it would stop BootstrapFewShot (max_errors=1) and the whole run.
                found = [dict.fromkeys(signature.output_fields)]
            if ours and not _readable(judge, found, inputs):
                _meter_of(model).unusable(key)  # the runner's rule: an answer the judge cannot read is not stored
            return found

        def _prepare_response_format(self, model: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:
            pass  # the request carries exactly what _with_format chose

    return _JudgeAdapter() if lm.adapter == "json" else _JudgeAdapter(use_json_adapter_fallback=False)


def _answer_key(lm: LMConfig, signature: Any, demos: Sequence[Mapping[str, Any]], inputs: Mapping[str, Any],
                lm_kwargs: Mapping[str, Any]) -> str:
    """The runner's cache key of one call, with the settings this call really sends.

    An optimiser may change the temperature or add arguments (a rollout id); they are in the key
    (:func:`~personagap.judges.runner.prompt_identity`), so such a call never reuses a plain call's answer.
    """
    temperature, max_tokens = lm_kwargs.get("temperature"), lm_kwargs.get("max_tokens")
    settings = replace(lm, temperature=lm.temperature if temperature is None else temperature,
                       max_tokens=lm.max_tokens if max_tokens is None else max_tokens)
    extra = {k: v for k, v in lm_kwargs.items() if k not in ("temperature", "max_tokens")}
    return answer_key(prompt_identity(settings, signature, demos, extra), inputs)


def _readable(judge: Judge, outputs: Sequence[Mapping[str, Any]], inputs: Mapping[str, Any]) -> bool:
    """Whether the judge's parser reads a label from every answer (what makes the runner cache one)."""
    probe = JudgeTask(key="", targets=("item",), inputs=dict(inputs))
    return all(judge.parse(o, probe)["item"].label is not None for o in outputs)


def _meter_of(model: Any) -> Meter:
    meter: Meter = model.meter
    return meter


def to_dspy(example: Example, judge: Judge) -> dspy.Example:
    """A DSPy example: the task's inputs, the human label spelt as the judge's output field, ids for audit."""
    name, spelling = _LABEL_FIELD[base_name(judge)]
    gold = example.human
    if example.task.meta.get("swapped"):
        gold = {"A": "B", "B": "A"}.get(gold, gold)  # demos show the answers in the order the model saw them
    return dspy.Example(**example.task.inputs, **{name: spelling[gold]}, item_id=example.item_id,
                        user_id=example.user_id).with_inputs(*example.task.inputs)


def class_weights(examples: Sequence[Example], classes: Sequence[str]) -> dict[str, float]:
    """Class-balanced weights from the human prevalence: ``n / (K * n_c)`` (each class weighs the same)."""
    counts = {c: sum(e.human == c for e in examples) for c in classes}
    present = [c for c in classes if counts[c]]
    n = sum(counts.values())
    return {c: (n / (len(present) * counts[c]) if counts[c] else 0.0) for c in classes}


def balanced_metric(judge: Judge, examples: Sequence[Example],
                    weights: Mapping[str, float]) -> Callable[..., float]:
    """Per-example metric for the optimiser: the human class's weight when the judge agrees, else 0.

    An answer that does not parse scores 0 (a failure, never a label).
    """
    by_id = {e.item_id: e for e in examples}

    def metric(example: Any, prediction: Any, trace: Any = None, *args: Any, **kwargs: Any) -> float:
        ex = by_id[str(example["item_id"])]
        label = read_label(judge, ex.task, prediction)
        return float(weights[ex.human]) if label == ex.human else 0.0

    return metric


def read_label(judge: Judge, task: JudgeTask, prediction: Any) -> str | None:
    """The judge's parser applied to a DSPy prediction (None when it does not parse)."""
    if prediction is None:
        return None
    outputs = prediction if isinstance(prediction, Mapping) else dict(prediction.items())
    return judge.parse(outputs, task)[task.targets[0]].label


def program_demos(program: dspy.Module) -> list[dict[str, Any]]:
    """The demonstrations of a program's (single) predictor, as plain dicts."""
    (predictor,) = program.predictors()
    return [dict(d.items()) if hasattr(d, "items") else dict(d) for d in predictor.demos]


def program_instructions(program: dspy.Module) -> str:
    """The instructions of a program's (single) predictor."""
    (predictor,) = program.predictors()
    return str(predictor.signature.instructions)


def program_id(program: dspy.Module, judge: Judge) -> str:
    """Content hash of what the program sends besides the inputs: instructions and demos (signature fields)."""
    fields = list(judge.signature.fields)
    demos = [{k: d.get(k) for k in fields if k in d} for d in program_demos(program)]
    blob = json.dumps({"i": program_instructions(program), "d": demos}, sort_keys=True, ensure_ascii=False,
                      default=str)
    return "opt-" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


@dataclass
class Evaluation:
    """A program's labels on some examples (None = the answer did not parse or the call failed)."""

    labels: dict[str, str | None]
    errors: dict[str, str]


def evaluate(program: dspy.Module, judge: Judge, examples: Sequence[Example], lm: dspy.BaseLM,
             adapter: dspy.Adapter, *, threads: int = 8) -> Evaluation:
    """Run a program on examples (in parallel) and read each answer with the judge's parser."""
    labels: dict[str, str | None] = {}
    errors: dict[str, str] = {}

    def one(ex: Example) -> tuple[str, str | None, str | None]:
        try:
            with dspy.context(lm=lm, adapter=adapter), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                prediction = program(**ex.task.inputs)
        except BudgetExhausted:
            raise
        except Exception as exc:  # a DSPy parse error or a failed request: a recorded failure, never a label
            return ex.item_id, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        verdict: Verdict = judge.parse(dict(prediction.items()), ex.task)[ex.task.targets[0]]
        return ex.item_id, verdict.label, verdict.error

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for item, label, error in pool.map(one, examples):
            labels[item] = label
            if error:
                errors[item] = error
    return Evaluation(labels, errors)


# --------------------------------------------------------------------------- corpus metrics

def table_metric(name: str) -> Callable[[FloatArray], FloatArray]:
    """A registered corpus metric of confusion tables ('kappa', 'ac1', 'balanced-accuracy', 'over_selection')."""
    import personagap.analysis.robust  # noqa: F401  registers 'ac1' and 'balanced_accuracy'

    key = name.replace("-", "_")
    if key not in METRICS:
        raise OptimizeError(f"unknown metric {name!r}; choose one of {', '.join(SELECTION_METRICS)}")
    return METRICS[key].fn


def user_tables(examples: Sequence[Example], labels: Mapping[str, str | None], classes: Sequence[str],
                users: Sequence[str]) -> FloatArray:
    """Confusion tables ``(U, K, K)`` per user (in ``users`` order) over examples the judge labelled."""
    code = {c: i for i, c in enumerate(classes)}
    index = {u: i for i, u in enumerate(users)}
    kept = [e for e in examples if labels.get(e.item_id) in code and e.user_id in index]
    return indexed_tables(np.array([code[e.human] for e in kept], dtype=np.int64),
                          np.array([code[str(labels[e.item_id])] for e in kept], dtype=np.int64),
                          np.array([index[e.user_id] for e in kept], dtype=np.int64), len(users), len(classes))


def corpus_score(metric: str, examples: Sequence[Example], labels: Mapping[str, str | None],
                 classes: Sequence[str]) -> float:
    """The corpus-level metric of a program's labels (its dev score); NaN when undefined."""
    tables = user_tables(examples, labels, classes, sorted({e.user_id for e in examples}))
    return float(table_metric(metric)(tables.sum(axis=0)))


@dataclass(frozen=True)
class Comparison:
    """One figure before and after on the test users, and the paired-bootstrap CI of the difference."""

    before: Estimate
    after: Estimate
    difference: Estimate


def compare(examples: Sequence[Example], before: Mapping[str, str | None], after: Mapping[str, str | None],
            classes: Sequence[str], metrics: Sequence[str], *, n_resamples: int = DEFAULT_RESAMPLES,
            seed: int = 0, level: float = 0.95) -> tuple[dict[str, Comparison], int, int]:
    """Before/after figures on the same items (both labelled), user-clustered, with a paired bootstrap.

    Both programs' tables are resampled with the *same* user weights, so the difference's CI reflects
    that the same users were judged twice. Every CI goes through the project's one bootstrap rule
    (:func:`~personagap.analysis.agreement.bootstrap_estimate`): none below ``MIN_USERS_FOR_CI`` users, and
    resamples where a figure is undefined are counted, not put in its interval.

    Returns:
        (metric -> comparison, number of items, number of users).
    """
    both = [e for e in examples if before.get(e.item_id) in classes and after.get(e.item_id) in classes]
    users = sorted({e.user_id for e in both})
    t_before = user_tables(both, before, classes, users)
    t_after = user_tables(both, after, classes, users)
    weights = resample_weights(len(users), n_resamples, seed)
    b_before, b_after = bootstrap_tables(t_before, weights), bootstrap_tables(t_after, weights)
    out = {}
    for name in metrics:
        fn = table_metric(name)
        pb, pa = float(fn(t_before.sum(axis=0))), float(fn(t_after.sum(axis=0)))
        sb, sa = fn(b_before), fn(b_after)
        out[name] = Comparison(bootstrap_estimate(pb, sb, len(users), level),
                               bootstrap_estimate(pa, sa, len(users), level),
                               bootstrap_estimate(pa - pb, sa - sb, len(users), level))
    return out, len(both), len(users)


# --------------------------------------------------------------------------- the run

@dataclass(frozen=True)
class OptimizeSettings:
    """What an optimisation run does (all recorded in the sidecar)."""

    stage: str
    judge: str
    optimizer: OptimizerName = "bootstrap-fewshot"
    metric: SelectionMetric = "kappa"
    budget: int = 200
    seed: int = 0
    n_users: int | None = None
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
    candidates: int = 4
    max_demos: int = 8
    max_bootstrapped: int = 4
    threads: int = 8
    n_resamples: int = DEFAULT_RESAMPLES
    datasets: tuple[str, ...] | None = None
    max_items: int | None = None
    """At most this many items per side (a seeded sample drawn after the user split): a cheap run."""


@dataclass(frozen=True)
class Plan:
    """What a run will do, printed before it starts (and all a dry run does)."""

    settings: OptimizeSettings
    split: UserSplit
    items: dict[str, int]
    prevalence: dict[str, float]
    max_calls: dict[str, int]
    est_cost: float | None
    cached: int
    classes: tuple[str, ...]
    """The class set of the run: the datasets' categories (:func:`dataset_classes`)."""

    def render(self) -> str:
        """The plan as lines for the terminal."""
        s, sp = self.settings, self.split
        cost = (f"~${self.est_cost:.4f} at most (list prices)" if self.est_cost is not None
                else "not known for this model")
        return "\n".join([
            f"optimize {s.stage}: judge {s.judge}, optimiser {s.optimizer}, selection metric {s.metric} on dev",
            f"  users (seed {sp.seed}): train {len(sp.train)}, dev {len(sp.dev)}, test {len(sp.test)}; "
            f"items: train {self.items['train']}, dev {self.items['dev']}, test {self.items['test']}",
            "  human prevalence on train: " + ", ".join(f"{k} {v:.3f}" for k, v in self.prevalence.items()),
            f"  LLM calls at most: optimiser {self.max_calls['optimise']} (--budget), dev selection "
            f"{self.max_calls['dev']}, test {self.max_calls['test']}; total {sum(self.max_calls.values())}",
            f"  cached answers available: {self.cached}; estimated cost: {cost}",
        ])


@dataclass
class OptimizeResult:
    """What a run did and found."""

    plan: Plan
    program_path: str
    program_id: str
    chosen: str
    candidates: list[dict[str, Any]]
    test: dict[str, Comparison]
    test_items: int
    test_users: int
    failures: dict[str, int]
    calls: dict[str, int]
    cache_hits: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    budget_exhausted: bool
    seconds: float

    def scores(self) -> dict[str, Any]:
        """Test figures as JSON-safe data (the sidecar's ``scores``)."""
        def est(e: Estimate) -> dict[str, Any]:
            return {"value": _safe(e.value), "ci": [_safe(e.ci[0]), _safe(e.ci[1])],
                    "undefined_resamples": e.n_undefined}
        return {"test": {m: {"before": est(c.before), "after": est(c.after), "difference": est(c.difference)}
                         for m, c in self.test.items()},
                "test_items": self.test_items, "test_users": self.test_users, "failures": self.failures,
                "dev": {c["name"]: _safe(c["dev_score"]) for c in self.candidates}, "chosen": self.chosen}

    def render(self) -> str:
        """The run for the terminal: plan, calls, candidates, and before/after on test users."""
        lines = [self.plan.render(), "",
                 f"calls used: optimiser {self.calls.get('optimise', 0)}, dev {self.calls.get('dev', 0)}, "
                 f"test {self.calls.get('test', 0)}; cache hits {self.cache_hits}; tokens {self.prompt_tokens} + "
                 f"{self.completion_tokens}; cost " + (f"${self.cost:.4f}" if self.cost is not None else "not reported")
                 + (" (budget exhausted: optimiser stopped early)" if self.budget_exhausted else ""),
                 f"candidates on dev ({self.plan.settings.metric}):"]
        for cand in self.candidates:
            mark = "  <- chosen" if cand["name"] == self.chosen else ""
            lines.append(f"  {cand['name']:<24} demos {cand['demos']:>2}  {_fmt(cand['dev_score'])}{mark}")
        lines.append(f"test users only ({self.test_users} users, {self.test_items} items both programs labelled; "
                     f"failures before {self.failures['before']}, after {self.failures['after']}):")
        lines.append(f"  {'':<16}{'before':>24}{'after':>24}{'after - before':>26}")
        for m, c in self.test.items():
            lines.append(f"  {m:<16}{_fmt_est(c.before):>24}{_fmt_est(c.after):>24}{_fmt_est(c.difference):>26}")
        if self.test_users < MIN_USERS_FOR_CI:
            plural = "s" if self.test_users != 1 else ""
            lines.append(f"  (too few users for a CI: {self.test_users} test user{plural}; use more --users)")
        lines.append(f"program: {self.program_path} ({self.program_id}); sidecar {sidecar_path(self.program_path)}")
        return "\n".join(lines)


def _safe(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or np.isnan(v) else f"{v:.3f}"


def _fmt_est(e: Estimate) -> str:
    if e.too_few_users:
        return f"{_fmt(e.value)} [no CI]"
    return f"{_fmt(e.value)} [{_fmt(e.ci[0])}, {_fmt(e.ci[1])}]"


def sidecar_path(program_path: str | Path) -> Path:
    """Where a program's JSON sidecar sits: ``PROGRAM.meta.json`` beside it."""
    path = Path(program_path)
    return path.with_name(path.name + ".meta.json")


def _split_examples(examples: Sequence[Example], split: UserSplit,
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


def plan_run(db: str | Path, settings: OptimizeSettings, lm: LMConfig) -> tuple[Plan, list[Example], Judge]:
    """Load the data, split the users and bound the calls; no LLM call.

    Raises:
        OptimizeError: Unknown judge for the stage, or too few labelled users/classes.
        StoreError: No items.
    """
    if settings.judge not in STAGE_JUDGES.get(settings.stage, ()):
        raise OptimizeError(f"judge {settings.judge!r} cannot be optimised for stage {settings.stage}; "
                            f"choose one of {', '.join(STAGE_JUDGES.get(settings.stage, ()))}")
    if settings.optimizer not in OPTIMIZERS:
        raise OptimizeError(f"unknown optimiser {settings.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    table_metric(settings.metric)
    judge = get_judge(settings.judge)
    examples, _, _ = load_examples(db, judge, datasets=settings.datasets, seed=settings.seed)
    if not examples:
        raise StoreError(f"{db}: no {settings.judge} items with a blind human label; import a release first")
    split = split_users([e.user_id for e in examples], settings.seed, settings.fractions, settings.n_users)
    sides = _split_examples(examples, split, settings.max_items)
    classes = dataset_classes(db, judge, settings.datasets or _default_datasets(judge))
    train_classes = {e.human for e in sides["train"]}
    if len(train_classes) < 2:
        raise OptimizeError(f"the train users' human labels have one class only ({', '.join(train_classes)}); "
                            "use more users or another --seed")
    n_train = len(sides["train"])
    prevalence = {c: sum(e.human == c for e in sides["train"]) / n_train for c in classes}
    max_calls = {"optimise": settings.budget, "dev": (1 + settings.candidates) * len(sides["dev"]),
                 "test": 2 * len(sides["test"])}
    name = base_name(judge)
    with opened(db, read_only=True) as con:
        row = con.execute(f"SELECT count(*) {_CACHE_ROWS_SQL}", [lm.model, name, f"{name}@"]).fetchone()
    n_cached = int(row[0]) if row else 0
    prices = token_prices(lm.model)
    est_cost = None
    if prices is not None and sides["dev"]:
        per_call = _prompt_tokens(judge, lm, sides["dev"][0], settings.max_demos)
        est_cost = sum(max_calls.values()) * prices.cost(per_call, lm.max_tokens)
    plan = Plan(settings, split, {k: len(v) for k, v in sides.items()}, prevalence, max_calls, est_cost, n_cached,
                classes)
    return plan, examples, judge


def _default_datasets(judge: Judge) -> tuple[str, ...] | None:
    """The datasets :func:`load_examples` reads when none are given (the study's stage-2 data for relevance)."""
    return ("recenter-stage2",) if base_name(judge) == "relevance-per-attribute" else None


def _prompt_tokens(judge: Judge, lm: LMConfig, example: Example, n_demos: int) -> int:
    """A rough prompt size (characters / 4) of one call carrying ``n_demos`` demos like this example."""
    adapter = judge_adapter(judge, lm)
    demo = to_dspy(example, judge)
    messages = adapter.format(judge.signature, demos=[demo] * n_demos, inputs=example.task.inputs)
    return sum(len(str(m.get("content", ""))) for m in messages) // 4


@contextmanager
def _phase(meter: Meter, name: str, on_phase: Callable[[str], None] | None) -> Iterator[None]:
    meter.phase = name
    if on_phase is not None:
        on_phase(name)
    yield


def optimize(db: str | Path, settings: OptimizeSettings, lm: LMConfig, out: str | Path, *,
             on_plan: Callable[[Plan], None] | None = None,
             on_phase: Callable[[str], None] | None = None) -> OptimizeResult:
    """Optimise a judge on train users, select on dev users, report on test users, save the program.

    Args:
        db: The DuckDB file with the imported items and human labels (its ``judge_cache`` keeps answers).
        settings: Judge, optimiser, metric, budget, seed, ...
        lm: The model to optimise for.
        out: Where to save the program (DSPy's JSON format); the sidecar goes to :func:`sidecar_path`.
        on_plan: Called with the plan before the first LLM call (the CLI prints it).
        on_phase: Called with 'optimise', 'dev' and 'test' as each phase starts (progress lines; tests
            use it to see which requests each phase sent).

    Returns:
        What the run did and the before/after figures on test users.
    """
    started = time.monotonic()
    plan, examples, judge = plan_run(db, settings, lm)
    if on_plan is not None:
        on_plan(plan)
    sides = _split_examples(examples, plan.split, settings.max_items)
    classes = plan.classes
    meter = Meter(budget=settings.budget, prices=token_prices(lm.model), cache=load_cache(db, judge, lm.model))
    metered = MeteredLM(lm, meter)
    adapter = judge_adapter(judge, lm)
    baseline = dspy.Predict(judge.signature)
    try:
        with _phase(meter, "optimise", on_phase):
            generated = _candidates(settings, judge, sides["train"], classes, metered, adapter)
        with _phase(meter, "dev", on_phase):
            candidates: list[tuple[str, dspy.Module, float]] = []
            for name, program in [("unoptimised", baseline), *generated]:
                ev = evaluate(program, judge, sides["dev"], metered, adapter, threads=settings.threads)
                candidates.append((name, program, corpus_score(settings.metric, sides["dev"], ev.labels, classes)))
        # Highest dev score wins; ties go to the earlier candidate (the unoptimised program first).
        best = max(range(len(candidates)), key=lambda i: (_rank(candidates[i][2]), -i))
        chosen_name, chosen, _ = candidates[best]
        with _phase(meter, "test", on_phase):
            before = evaluate(baseline, judge, sides["test"], metered, adapter, threads=settings.threads)
            after = before if chosen is baseline else evaluate(chosen, judge, sides["test"], metered, adapter,
                                                               threads=settings.threads)
    finally:
        save_cache(db, judge, lm.model, meter.new_entries)
    reported = reported_metrics(classes)
    test, n_items, n_users = compare(sides["test"], before.labels, after.labels, classes, reported,
                                     n_resamples=settings.n_resamples, seed=settings.seed)
    result = OptimizeResult(
        plan=plan, program_path=str(out), program_id=program_id(chosen, judge), chosen=chosen_name,
        candidates=[{"name": n, "demos": len(program_demos(p)), "dev_score": s} for n, p, s in candidates],
        test=test, test_items=n_items, test_users=n_users,
        failures={"before": sum(v is None for v in before.labels.values()),
                  "after": sum(v is None for v in after.labels.values())},
        calls=dict(meter.calls), cache_hits=meter.cache_hits, prompt_tokens=meter.prompt_tokens,
        completion_tokens=meter.completion_tokens, cost=meter.cost, budget_exhausted=meter.exhausted,
        seconds=time.monotonic() - started)
    save_program(chosen, out, judge, settings, lm, plan.split, examples, result)
    return result


def reported_metrics(classes: Sequence[str]) -> list[str]:
    """The figures :func:`optimize` reports before/after for a judge with these classes (see :data:`REPORTED`)."""
    binary = len(classes) == 2
    return [m for m in REPORTED if (m != "over_selection" or binary) and (m != "accuracy" or not binary)]


def _rank(score: float) -> float:
    return float("-inf") if np.isnan(score) else score


def _candidates(settings: OptimizeSettings, judge: Judge, train: Sequence[Example], classes: Sequence[str],
                lm: MeteredLM, adapter: dspy.Adapter) -> list[tuple[str, dspy.Module]]:
    """Programs the optimiser proposes from train users only (never dev or test)."""
    weights = class_weights(train, classes)
    metric = balanced_metric(judge, train, weights)
    trainset = [to_dspy(e, judge) for e in train]
    out: list[tuple[str, dspy.Module]] = []
    # DSPy's optimisers print their progress on stdout; it would mix with our report (kept on stderr).
    with dspy.context(lm=lm, adapter=adapter), warnings.catch_warnings(), redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        if settings.optimizer == "bootstrap-fewshot":
            for i in range(settings.candidates):
                if lm.meter.exhausted:
                    break
                shuffled = list(trainset)
                random.Random(settings.seed + i).shuffle(shuffled)
                teleprompter = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=settings.max_bootstrapped,
                                                     max_labeled_demos=settings.max_demos, max_rounds=1, max_errors=1)
                try:
                    out.append((f"bootstrap-{i + 1}", teleprompter.compile(dspy.Predict(judge.signature),
                                                                           trainset=shuffled)))
                except BudgetExhausted:
                    break
        elif settings.optimizer == "mipro":
            try:
                import optuna  # noqa: F401  MIPROv2 searches with it
            except ImportError:
                raise OptimizeError("--optimizer mipro needs optuna: pip install optuna") from None
            teleprompter = dspy.MIPROv2(metric=metric, auto=None, num_candidates=settings.candidates,
                                        max_bootstrapped_demos=settings.max_bootstrapped,
                                        max_labeled_demos=settings.max_demos, num_threads=settings.threads,
                                        seed=settings.seed, verbose=False)
            try:
                # Minibatches keep a trial's cost at ~20 calls; MIPRO holds out part of train as its own valset.
                best = teleprompter.compile(dspy.Predict(judge.signature), trainset=trainset,
                                            num_trials=settings.candidates, minibatch=len(trainset) > 40,
                                            minibatch_size=20, minibatch_full_eval_steps=max(2, settings.candidates))
                out.append(("mipro", best))
            except BudgetExhausted:
                pass
        else:
            teleprompter = dspy.SIMBA(metric=metric, bsize=min(16, len(trainset)), num_candidates=settings.candidates,
                                      max_steps=2, max_demos=settings.max_demos, num_threads=settings.threads)
            try:
                best = teleprompter.compile(dspy.Predict(judge.signature), trainset=trainset, seed=settings.seed)
                out.append(("simba", best))
            except BudgetExhausted:
                pass
    return out


# --------------------------------------------------------------------------- saving and judging with a program

def save_program(program: dspy.Module, out: str | Path, judge: Judge, settings: OptimizeSettings, lm: LMConfig,
                 split: UserSplit, examples: Sequence[Example], result: OptimizeResult) -> Path:
    """Write the program (DSPy's JSON state) and its sidecar; return the sidecar's path."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    meta = {
        "format": SIDECAR_FORMAT, "format_version": SIDECAR_VERSION, "program_id": program_id(program, judge),
        "base_judge": judge.name, "judge_version": judge.version, "stage": judge.stage,
        "optimizer": settings.optimizer, "metric": settings.metric, "budget": settings.budget,
        "max_items": settings.max_items,
        "split_seed": split.seed, "swap_seed": settings.seed,
        "users": {"train": list(split.train), "dev": list(split.dev), "test": list(split.test)},
        "datasets": list(settings.datasets) if settings.datasets else None,
        "data_fingerprint": data_fingerprint(examples), "model": lm.model, "lm": lm.public(),
        "scores": result.scores(),
        "calls": {"by_phase": result.calls, "cache_hits": result.cache_hits, "cost": result.cost,
                  "budget_exhausted": result.budget_exhausted},
        "created_at": now().isoformat(), "git_sha": git_sha(),
    }
    side = sidecar_path(path)
    side.write_text(json.dumps(meta, indent=2, ensure_ascii=False))
    return side


@dataclass(frozen=True)
class SavedProgram:
    """A program loaded back: its judge (a new version of the base judge) and its sidecar."""

    judge: Judge
    meta: dict[str, Any]

    @property
    def in_sample_users(self) -> frozenset[str]:
        """Users whose items shaped the program (train and dev): its labels on them are in-sample."""
        users = self.meta["users"]
        return frozenset(users["train"]) | frozenset(users["dev"])


class ProgramJudge(Judge):
    """A base judge plus an optimised program's instructions and demonstrations (built by :func:`program_judge`)."""

    program_demos: ClassVar[tuple[dict[str, Any], ...]] = ()

    def demos(self) -> list[dict[str, Any]]:
        """The program's demonstrations, in the order DSPy puts them before each call."""
        return [dict(d) for d in self.program_demos]

    def program(self) -> Program:
        """The runner's prompt recipe: this program's signature (instructions) and demos (all in its cache key)."""
        return Program(self.signature, tuple(self.demos()))


def program_judge(base: Judge, program: dspy.Module) -> Judge:
    """The judge a program defines: the base judge's parser, the program's signature and demos.

    Its name is ``<base>@<program id>``, so it is a rater of its own and its cached answers are keyed by
    the program's content (instructions and demos) through the name.
    """
    (predictor,) = program.predictors()
    fields = set(base.signature.fields)
    demos = tuple({k: v for k, v in d.items() if k in fields} for d in program_demos(program))
    cls = type(f"Program{type(base).__name__}", (ProgramJudge, type(base)), {
        "name": f"{base.name}@{program_id(program, base)}", "signature": predictor.signature,
        "program_demos": demos, "__module__": __name__})
    judge: Judge = cls()
    return judge


def load_program(path: str | Path) -> SavedProgram:
    """Load a program saved by :func:`optimize` and check its sidecar.

    Raises:
        OptimizeError: No program or sidecar, a sidecar of another format, or a program whose content
            does not match its sidecar.
    """
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise OptimizeError(f"{path}: no such program file")
    if not side.is_file():
        raise OptimizeError(f"{side}: the program's sidecar is missing (it is written beside the program)")
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as exc:
        raise OptimizeError(f"{side}: not a readable JSON sidecar ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        raise OptimizeError(f"{side}: field 'format': not a {SIDECAR_FORMAT} sidecar")
    if int(meta.get("format_version", 0)) > SIDECAR_VERSION:
        raise OptimizeError(f"{side}: field 'format_version': {meta.get('format_version')} is newer than this "
                            f"PersonaGap reads ({SIDECAR_VERSION})")
    try:
        base = get_judge(str(meta["base_judge"]))
        program = dspy.Predict(base.signature)
        program.load(str(path))
    except (KeyError, ValueError, OSError) as exc:
        raise OptimizeError(f"{path}: cannot load the program ({str(exc).splitlines()[0][:200]})") from None
    if program_id(program, base) != meta.get("program_id"):
        raise OptimizeError(f"{path}: field 'program_id': the program's instructions/demos do not match its "
                            f"sidecar ({meta.get('program_id')}); re-run optimize")
    return SavedProgram(program_judge(base, program), meta)


def program_tasks(saved: SavedProgram, tasks: Sequence[JudgeTask], users: Mapping[str, str]) -> list[JudgeTask]:
    """The judge's tasks, with condition :data:`IN_SAMPLE` on items of the program's own train/dev users.

    Args:
        saved: The loaded program.
        tasks: The base judge's tasks (one target item each).
        users: item id -> user id.
    """
    inside = saved.in_sample_users
    return [replace(t, condition=IN_SAMPLE) if users.get(t.targets[0]) in inside else t for t in tasks]


def judge_with_program(db: str | Path, program_path: str | Path, lm: LMConfig, *,
                       datasets: tuple[str, ...] | None = None, concurrency: int = 8, limit: int | None = None,
                       max_retries: int = 4, progress: bool = True) -> Any:
    """Run a saved program as a judge over the stored items (``judge relevance|response --program``).

    Labels on the program's train/dev users are stored under condition ``in-sample`` (kept out of every
    comparison); the rest under the base judge's usual condition. Pairwise items are shown in the A/B order
    the optimiser showed them (the sidecar's ``swap_seed``), so the labels stored for the test users are the
    answers its "after" figures were computed from.

    Returns:
        The runner's :class:`~personagap.judges.runner.RunSummary`.
    """
    from personagap.judges.runner import run_judge

    saved = load_program(program_path)
    # Sidecars written before swap_seed was recorded: the optimiser drew its swaps with the split seed.
    swap_seed = int(saved.meta.get("swap_seed", saved.meta.get("split_seed", 0)))
    _, tasks, items = load_examples(db, saved.judge, datasets=datasets or _datasets(saved), seed=swap_seed)
    if not tasks:
        raise StoreError(f"{db}: no items for judge {saved.meta['base_judge']}; import a release first")
    users = dict(zip(items["item_id"].astype(str), items["user_id"].astype(str), strict=True))
    return run_judge(db, saved.judge, program_tasks(saved, tasks, users), lm, concurrency=concurrency, limit=limit,
                     max_retries=max_retries, progress=progress, source=f"program:{saved.meta['program_id']}")


def _datasets(saved: SavedProgram) -> tuple[str, ...] | None:
    found = saved.meta.get("datasets")
    return tuple(found) if found else None
