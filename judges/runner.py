"""Run a judge over tasks: bounded concurrency, retries, a DuckDB cache, resumable writes.

How a run survives trouble:

* **Transient faults** (HTTP 429, 5xx, timeouts, dropped connections) are retried
  with exponential backoff and jitter; a 429's ``Retry-After`` is honoured.
  After ``max_retries`` the task is recorded as failed with the reason.
* **Unparseable answers** are recorded as failed labels with their raw text. They
  are not cached, so a rerun asks again.
* **No paid answer is lost**: each answer is appended to the run's journal beside the
  database the moment it arrives (:mod:`personagap.judges.journal`), before its worker
  sends the next call. A writer stores batches in DuckDB about once a second, each in
  one short transaction (open, write, close -- so a dashboard can read in between).
  A run killed with SIGKILL therefore loses at most the calls in flight (``concurrency``):
  the next run on the database stores the journal's answers first and marks the killed
  run 'interrupted' (:mod:`personagap.judges.liveness`).
* **Another process holds the database** (DuckDB locks the file across processes): the
  writer says so once, keeps the answers (journal) and retries until the file frees;
  calls go on meanwhile. Any other write failure stops the run at once (no new call)
  and says where the unwritten answers are kept.
* **Cache**: each parsed answer is cached under :func:`~personagap.judges.cache.answer_key`: a hash of the task's
  inputs and :func:`~personagap.judges.cache.prompt_identity` -- everything else that can change an answer (model,
  server, temperature, max_tokens, adapter, response_format, the prompt's instructions,
  fields and demos). ``optimize`` keys its calls the same way, so neither pays twice. A
  rerun re-derives those labels locally and sends requests only for tasks that are missing
  or failed; the summary says how many answers came from the cache.

The API key is read from the environment at call time and never stored: it is
not in the ``runs`` parameters, the cache key, the journal, the labels or any log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import dspy
import duckdb
from tqdm import tqdm

from personagap.judges.base import Judge, JudgeTask, Program, Verdict, rater_name
from personagap.judges.cache import answer_key, call_identity, plain_demo, request_extra
from personagap.judges.confidence import TokenLogprob, confidence_entries, parse_fields, program_for
from personagap.judges.http_call import Fatal, Retryable, first_line, one_call
from personagap.judges.journal import Journal, recover_journals, store_answers
from personagap.judges.lm import ConfidenceMode, LMConfig, TokenPrices, token_prices
from personagap.judges.lm_overhead import adapter_for, memoize_pricing_lookup
from personagap.judges.sampling import current_sample
from personagap.judges.summary import RunSummary
from personagap.liveness import PROCESS_KEY, mark_interrupted_runs, process_marker
from personagap.records import Label, Run
from personagap.store import LOCK_MARKERS, StoreError, connect, git_sha, now, opened, upsert
from personagap.store.judge_answers import cached_answers

# LMConfig and token_prices live in personagap.judges.lm, RunSummary in personagap.judges.summary; they stay
# importable from here for the stages and commands that import them with run_judge.
__all__ = ["LMConfig", "RunSummary", "TokenPrices", "is_lock_conflict", "run_judge", "token_prices"]


@dataclass
class _Outcome:
    task: JudgeTask
    key: str
    raw: str | None
    verdicts: dict[str, Verdict]
    usage: dict[str, Any] | None = None
    cacheable: bool = False
    """Fresh from the provider and fully parsed: worth caching (cached answers are already stored)."""
    confidence: dict[str, Any] = field(default_factory=dict)
    """The answer's confidence entries for its labels' meta (:mod:`personagap.judges.confidence`)."""


@dataclass(frozen=True)
class _Reader:
    """How a run reads answers: the judge's parser, the program prompts were built from, and the confidence mode."""

    judge: Judge
    program: Program
    base: Program
    """The judge's own program (without the verbal confidence field): an answer missing only that field parses."""
    adapter: dspy.Adapter
    mode: ConfidenceMode


@dataclass
class _Answer:
    """An outcome with the rows it writes: its labels, and its cache row when it is cacheable."""

    outcome: _Outcome
    labels: list[Label]
    cache_row: dict[str, Any] | None




def run_judge(db: str | Path, judge: Judge, tasks: Sequence[JudgeTask], lm: LMConfig, *,
              concurrency: int = 8, limit: int | None = None, max_retries: int = 4, backoff_base: float = 0.5,
              backoff_cap: float = 30.0, flush_every: int = 256, flush_seconds: float = 1.0,
              progress: bool = True, source: str = "", seed: int = 0, sample: int | None = None) -> RunSummary:
    """Judge ``tasks`` with ``lm`` and store one label per target item.

    Args:
        db: The DuckDB file; labels land under rater :func:`rater_name` (judge, version, model).
        judge: A registered judge instance (its :meth:`~personagap.judges.base.Judge.program` builds the prompts).
        tasks: The calls to make, in a stable order.
        lm: Model settings.
        concurrency: Calls in flight at once.
        limit: Judge only the first N tasks.
        max_retries: Retries per call on 429/5xx/timeouts before recording a failure.
        backoff_base: First backoff in seconds (doubles per retry, plus jitter).
        backoff_cap: Longest backoff (a Retry-After is honoured up to this).
        flush_every: Write to the store after this many results...
        flush_seconds: ...or after this many seconds, whichever comes first.
        progress: Show a progress bar on stderr.
        source: What the tasks were built from (stored on the run row).
        seed: Seed of the backoff jitter (recorded).
        sample: Sample ``k`` of a repeated run (:mod:`personagap.judges.repeats`): its own rater and its own cached
            answers (the same request asked again at a temperature above 0 may answer otherwise). Default: the
            sample set by :func:`personagap.judges.sampling.as_sample`, if any.

    Returns:
        Counts of what happened.

    Raises:
        StoreError: The database cannot be written for a reason other than another process's lock; the run
            stops at once (no new call) and its answers stay in its journal for the next run to store.
    """
    chosen = list(tasks)[:limit] if limit is not None else list(tasks)
    keys = {t.key for t in chosen}
    if len(keys) != len(chosen):
        raise ValueError("task keys must be unique within a run")
    sample = current_sample() if sample is None else sample  # a stage's run inside repeats.as_sample
    rater = rater_name(judge, lm.model, lm.confidence, sample)
    program = program_for(judge, lm.confidence)
    identity = call_identity(judge, lm, program)
    if sample is not None:
        identity = answer_key(identity, {"sample": sample})
    run = Run(run_id=f"judge-{uuid.uuid4().hex[:12]}", kind="judge", source=source, rater=rater,
              judge_version=judge.version, git_sha=git_sha(), started_at=now(), status="running",
              parameters={"judge": judge.name, "lm": lm.public(), "concurrency": concurrency, "limit": limit,
                          "max_retries": max_retries, "tasks": len(chosen), "seed": seed, "sample": sample,
                          "cache_identity": identity, PROCESS_KEY: process_marker()})
    summary = RunSummary(run_id=run.run_id, rater=rater, tasks=len(chosen))
    started = time.monotonic()
    task_keys = {t.key: answer_key(identity, t.inputs) for t in chosen}
    with opened(db) as con:
        # First what killed runs left behind: their journaled answers become labels and cache entries.
        summary.recovered = recover_journals(con, db)
        summary.interrupted_runs = mark_interrupted_runs(con)
        upsert(con, "runs", [run.model_dump()])
        cached_raw = _cached(con, list(set(task_keys.values())))
    reader = _Reader(judge, program, judge.program(), adapter_for(lm.adapter), lm.confidence)
    notes = _Notes(summary, db)

    # Cached answers are re-parsed locally (no request) so their labels are exact even if rows were lost.
    cached_answers, pending = [], []
    for t in chosen:
        hit = cached_raw.get(task_keys[t.key])
        if hit is None:
            pending.append(t)
        else:
            raw, stored = hit
            outcome = _outcome(reader, t, task_keys[t.key], raw, None, fresh=False,
                               cached_confidence=stored.get("confidence") if stored else None)
            cached_answers.append(_answer(outcome, run.run_id, rater))
    summary.cached = len(cached_answers)

    try:
        _store_patiently(lambda: _write(db, cached_answers, summary), notes, len(cached_answers))
        if pending:
            asyncio.run(_run_pending(db, reader, lm, pending, task_keys, run.run_id, rater,
                                     summary, notes, concurrency=concurrency, max_retries=max_retries,
                                     backoff_base=backoff_base, backoff_cap=backoff_cap, flush_every=flush_every,
                                     flush_seconds=flush_seconds, progress=progress, rng=random.Random(seed)))
    except BaseException as exc:
        status: Literal["interrupted", "failed"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        # Best effort: the run's own error is what the user must see, not a second one about its status row.
        with contextlib.suppress(Exception):
            _finish(db, run, summary, status, started, notes, patient=False)
        raise
    summary.status = "failed" if summary.all_failed() else "finished"
    _finish(db, run, summary, summary.status, started, notes, patient=True)
    return summary


def _finish(db: str | Path, run: Run, summary: RunSummary, status: Literal["finished", "interrupted", "failed"],
            started: float, notes: _Notes, *, patient: bool) -> None:
    summary.seconds = time.monotonic() - started
    finished = run.model_copy(update={"finished_at": now(), "status": status,
                                      "parameters": run.parameters | {"summary": asdict(summary)}})

    def write() -> None:
        with closing(connect(db, wait_seconds=_LOCK_POLL_SECONDS)) as con:
            upsert(con, "runs", [finished.model_dump()])

    if patient:
        _store_patiently(write, notes, 0)
    else:
        write()


_LOCK_POLL_SECONDS = 1.0
"""How long one write waits for another process's lock before the runner gets control back."""


def is_lock_conflict(exc: BaseException) -> bool:
    """Whether a store error means another process holds the database file (it will free it)."""
    return isinstance(exc, StoreError) and any(m in str(exc) for m in LOCK_MARKERS)


class _Notes:
    """Tells the user (stderr, above the progress bar) and keeps what was said in the summary."""

    def __init__(self, summary: RunSummary, db: str | Path) -> None:
        self.summary, self.db = summary, db
        self.locked_since: float | None = None

    def __call__(self, text: str) -> None:
        self.summary.notes.append(text)
        tqdm.write(f"note: {text}", file=sys.stderr)

    def locked(self, waiting: int, journal: Path | None) -> None:
        """A write met another process's lock (said once per episode)."""
        if self.locked_since is not None:
            return
        self.locked_since = time.monotonic()
        if not waiting:
            self(f"{self.db} is locked by another process; the run's final status is written when it frees "
                 "(retrying; every answer is already stored)")
            return
        kept = f"kept in {journal}" if journal is not None else "kept in memory"
        self(f"{self.db} is locked by another process; {waiting} answers waiting to be written are {kept} "
             "and will be written when it frees (retrying; a run stopped now leaves them for the next run)")

    def freed(self, written: int) -> None:
        """The write that met the lock went through."""
        if self.locked_since is None:
            return
        waited = time.monotonic() - self.locked_since
        self.summary.lock_wait_seconds += waited
        self.locked_since = None
        self(f"{self.db} is free again after {waited:.1f}s: {written} waiting answers written, none lost"
             if written else f"{self.db} is free again after {waited:.1f}s")


def _store_patiently(write: Callable[[], None], notes: _Notes, count: int, journal: Path | None = None) -> None:
    """Run ``write`` until it succeeds, waiting out other processes' locks (and saying so); other errors raise."""
    delay = 0.2
    while True:
        try:
            write()
        except StoreError as exc:
            if not is_lock_conflict(exc):
                raise
            notes.locked(count, journal)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
            continue
        notes.freed(count)
        return


def _cached(con: Any, keys: list[str]) -> dict[str, tuple[str, dict[str, Any] | None]]:
    if not keys:
        return {}
    rows = cached_answers(con, keys)
    return {k: (r, json.loads(u) if isinstance(u, str) else u) for k, r, u in rows if r is not None}


def _outcome(reader: _Reader, task: JudgeTask, key: str, raw: str, usage: dict[str, Any] | None, *, fresh: bool,
             tokens: list[TokenLogprob] | None = None, cached_confidence: dict[str, Any] | None = None) -> _Outcome:
    """Parse one raw answer into verdicts: adapter split first, then the judge's pure parser, then its confidence.

    A cached answer has no log-probabilities: its confidence is the one computed when it was fresh (kept in the
    cache row), so a rerun stores the same meta.
    """
    judge = reader.judge
    try:
        fields, had_confidence = parse_fields(reader.adapter, reader.program, reader.base, raw)
    except Exception as exc:  # DSPy raises AdapterParseError (and others) on malformed text
        error = f"unparseable: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        return _Outcome(task, key, raw, {t: Verdict(None, None, error) for t in task.targets}, usage)
    verdicts = judge.parse(fields, task)
    missing = set(task.targets) - set(verdicts)
    if missing:
        raise RuntimeError(f"judge {judge.name} returned no verdict for {len(missing)} targets")
    ok = all(v.label is not None for v in verdicts.values())
    if reader.mode == "logprobs" and not fresh and cached_confidence is not None:
        confidence = dict(cached_confidence)
    else:
        confidence = confidence_entries(reader.mode, judge, fields, had_confidence, raw, tokens)
    return _Outcome(task, key, raw, verdicts, usage, cacheable=ok and fresh, confidence=confidence)


def _failed(task: JudgeTask, key: str, error: str) -> _Outcome:
    return _Outcome(task, key, None, {t: Verdict(None, None, error) for t in task.targets})


def _answer(o: _Outcome, run_id: str, rater: str) -> _Answer:
    """The rows one outcome writes (built once: the journal and the database get the same)."""
    # A confidence belongs to a label; a failed label carries none.
    labels = [Label(item_id=target, rater=rater, rater_kind="llm", condition=o.task.condition, label=v.label,
                    raw=o.raw, reason=v.reason, error=v.error, run_id=run_id,
                    meta=({**o.task.meta, **o.confidence} if v.label is not None else o.task.meta) or None)
              for target, v in o.verdicts.items()]
    cache_row = None
    if o.cacheable:
        name, version, model = rater.split("/", 2)
        # The confidence rides along: log-probabilities are not in the cached text, and a rerun must store it.
        usage = (o.usage or {}) | ({"confidence": o.confidence} if o.confidence else {})
        cache_row = {"key": o.key, "judge": name, "judge_version": int(version.lstrip("v")), "model": model,
                     "label": None, "raw": o.raw, "reason": None, "error": None, "usage": usage or None,
                     "created_at": now()}
    return _Answer(o, labels, cache_row)


async def _run_pending(db: str | Path, reader: _Reader, lm: LMConfig, pending: list[JudgeTask],
                       task_keys: dict[str, str], run_id: str, rater: str, summary: RunSummary, notes: _Notes,
                       *, concurrency: int, max_retries: int,
                       backoff_base: float, backoff_cap: float, flush_every: int, flush_seconds: float,
                       progress: bool, rng: random.Random) -> None:
    judge, program, adapter = reader.judge, reader.program, reader.adapter
    memoize_pricing_lookup()  # per-call CPU: see judges/lm_overhead.py
    prices = token_prices(lm.model)
    client = dspy.LM(lm.model, api_base=lm.api_base, api_key=lm.api_key(), cache=False, num_retries=0,
                     timeout=lm.timeout, temperature=lm.temperature, max_tokens=lm.max_tokens)
    extra = request_extra(judge, lm) | ({"logprobs": True} if lm.confidence == "logprobs" else {})
    demos = [plain_demo(d) for d in program.demos]
    todo: asyncio.Queue[JudgeTask] = asyncio.Queue()
    for t in pending:
        todo.put_nowait(t)
    queue: asyncio.Queue[_Answer | None] = asyncio.Queue()
    journal = Journal(db, run_id)
    stop = asyncio.Event()
    fatal: list[StoreError] = []  # why the run stopped early (a write that cannot succeed)
    bar = tqdm(total=len(pending), desc=f"judging ({judge.name})", unit="call", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    db_failed = False  # the database refuses writes (not a lock): answers stay in the journal

    def fail(exc: StoreError) -> None:
        nonlocal db_failed
        db_failed = True
        halt(StoreError(f"run stopped: cannot write answers: {exc}"))

    def halt(error: StoreError) -> None:
        if not fatal:
            fatal.append(error)
            stop.set()  # no new call: the calls in flight finish and their answers are kept
            notes(f"stopping the run at once: {error}")

    async def worker() -> None:
        # A fixed pool of `concurrency` workers, each formatting its next prompt only when it is free:
        # formatting all prompts up front would stall the first requests by seconds on large runs.
        while not stop.is_set():
            try:
                task = todo.get_nowait()
            except asyncio.QueueEmpty:
                return
            answer = _answer(await call(task), run_id, rater)
            try:
                # On disk before this worker sends its next call: a SIGKILL loses only the calls in flight.
                journal.append(answer.labels, answer.cache_row)
            except OSError as exc:
                halt(StoreError(f"{journal.path}: cannot keep answers on disk: {exc}"))
            await queue.put(answer)

    async def call(task: JudgeTask) -> _Outcome:
        key = task_keys[task.key]
        messages = adapter.format(program.signature, demos=demos, inputs=task.inputs)
        for attempt in range(max_retries + 1):
            summary.requests += 1
            try:
                raw, usage, tokens = await one_call(client, messages, extra, lm.timeout, prices)
            except Retryable as exc:
                if attempt == max_retries:
                    return _failed(task, key, f"{exc.kind}: {exc} (after {attempt + 1} attempts)")
                summary.retries += 1
                delay = min(backoff_cap, backoff_base * 2 ** attempt) * (0.5 + rng.random())
                if exc.retry_after is not None:
                    delay = min(backoff_cap, max(delay, exc.retry_after))
                await asyncio.sleep(delay)
                continue
            except Fatal as exc:
                return _failed(task, key, f"request: {exc}")
            return _outcome(reader, task, key, raw, usage, fresh=True, tokens=tokens)
        raise AssertionError("unreachable: the last attempt returns")

    async def flush(batch: list[_Answer]) -> bool:
        """One attempt to write ``batch``; False (batch kept) while another process holds the file."""
        try:
            await asyncio.to_thread(_write, db, batch, summary, wait_seconds=_LOCK_POLL_SECONDS)
        except StoreError as exc:
            if is_lock_conflict(exc):
                notes.locked(len(batch), journal.path)  # calls go on: their answers are safe in the journal
            else:
                fail(exc)
            return False
        notes.freed(len(batch))
        return True

    async def writer() -> list[_Answer]:
        batch: list[_Answer] = []
        last = time.monotonic()
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=flush_seconds)
            except TimeoutError:
                item = _TICK  # nothing arrived: still flush what waits, so a slow run writes steadily
            if item is None:
                break
            if item is not _TICK:
                batch.append(item)
                bar.update(1)
            if batch and not db_failed and (len(batch) >= flush_every or time.monotonic() - last >= flush_seconds):
                if await flush(batch):
                    batch = []
                last = time.monotonic()
        if batch and not db_failed:
            try:
                await asyncio.to_thread(_store_patiently, lambda: _write(db, batch, summary), notes, len(batch),
                                        journal.path)
            except StoreError as exc:
                fail(exc)
                return batch
            batch = []
        return batch

    # DSPy hops to worker threads several times per call; the default pool (cpu + 4 threads) would queue
    # the calls in flight behind each other.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=concurrency + 4))
    writer_task = asyncio.create_task(writer())
    stored = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # DSPy's notice about messages=; see http_call.one_call
            try:
                await asyncio.gather(*(worker() for _ in range(min(concurrency, len(pending)))))
            finally:
                await queue.put(None)
                unwritten = await writer_task
                bar.close()
        if db_failed:
            raise StoreError(f"{fatal[0]}; the {len(unwritten)} answers not written are kept in {journal.path} "
                             "and the next run on this database stores them")
        stored = True  # every answer is in the database: the journal has done its job
        if fatal:
            raise StoreError(f"{fatal[0]}; every answer received was written to {db}")
    finally:
        journal.close(delete=stored)


_TICK = _Answer(_Outcome(JudgeTask(key="", targets=(), inputs={}), "", None, {}), [], None)


def _write(db: str | Path, answers: Sequence[_Answer], summary: RunSummary, *,
           wait_seconds: float = _LOCK_POLL_SECONDS) -> None:
    """Write a batch of answers (labels + cache rows) in one short transaction, then count them as done."""
    if not answers:
        return
    labels = [label for a in answers for label in a.labels]
    cache_rows = [a.cache_row for a in answers if a.cache_row is not None]
    try:
        with closing(connect(db, wait_seconds=wait_seconds)) as con:
            store_answers(con, labels, cache_rows)
    except duckdb.Error as exc:  # the file or its tables refuse the write: one line for the user, not a traceback
        raise StoreError(f"{db}: {first_line(exc)}") from exc
    for a in answers:  # only after the commit: a batch written again after a lock wait is counted once
        _count(summary, a.outcome)


def _count(summary: RunSummary, o: _Outcome) -> None:
    for v in o.verdicts.values():
        if v.label is None:
            summary.failed += 1
            kind = (v.error or "unknown").split(":", 1)[0]
            summary.failures_by_reason[kind] = summary.failures_by_reason.get(kind, 0) + 1
        else:
            summary.judged += 1
    if o.usage:
        summary.prompt_tokens += int(o.usage.get("prompt_tokens") or 0)
        summary.completion_tokens += int(o.usage.get("completion_tokens") or 0)
        if o.usage.get("cost") is not None:
            summary.cost = (summary.cost or 0.0) + float(o.usage["cost"])
