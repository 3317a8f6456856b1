"""Run a judge over tasks: bounded concurrency, retries, a DuckDB cache, resumable writes.

How a run survives trouble:

* **Transient faults** (HTTP 429, 5xx, timeouts, dropped connections) are retried
  with exponential backoff and jitter; a 429's ``Retry-After`` is honoured.
  After ``max_retries`` the task is recorded as failed with the reason.
* **Unparseable answers** are recorded as failed labels with their raw text. They
  are not cached, so a rerun asks again.
* **Writes as results arrive**: a writer flushes small batches, each in one short
  transaction (open, write, close — so a dashboard can read in between). A run
  killed with SIGKILL loses at most the calls in flight.
* **Cache**: each parsed answer is cached under sha256(judge, version, model,
  adapter, inputs). A rerun re-derives those labels locally and sends requests
  only for tasks that are missing or failed.

The API key is read from the environment at call time and never stored: it is
not in the ``runs`` parameters, the cache, the labels or any log line.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import sys
import time
import uuid
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import dspy
from tqdm import tqdm

from personagap.judges.base import Judge, JudgeTask, Verdict, rater_name
from personagap.judges.lm_overhead import adapter_for, memoize_pricing_lookup
from personagap.records import Label, Run
from personagap.store import git_sha, now, opened, upsert, write_labels


@dataclass(frozen=True)
class LMConfig:
    """Which LLM to call and how.

    Attributes:
        model: Any LiteLLM/DSPy model string, e.g. ``openai/gpt-4o-mini`` or
            ``openai/<served-name>`` with ``api_base`` for a local server.
        api_base: Base URL of an OpenAI-compatible server (``http://127.0.0.1:8000/v1``).
        api_key_env: Environment variable holding the key. Default: the provider's
            usual variable (``OPENAI_API_KEY`` for ``openai/``); with ``api_base`` and no
            key set, a placeholder is sent (local servers ignore it).
        temperature: Sampling temperature (0 for reproducible judgments).
        max_tokens: Answer length cap.
        timeout: Seconds per call before it counts as a timeout.
        adapter: DSPy adapter that formats prompts and parses answers ('json' or 'chat').
        structured: Send the judge's JSON schema as ``response_format`` (constrained decoding; what makes
            small local models answer parseably): 'json_schema' in OpenAI's shape (OpenAI, vLLM),
            'json_object' as ``{"type": "json_object", "schema": ...}`` (llama.cpp's server), or 'off'.
    """

    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 512
    timeout: float = 60.0
    adapter: Literal["json", "chat"] = "json"
    structured: Literal["off", "json_schema", "json_object"] = "off"

    def public(self) -> dict[str, Any]:
        """The settings safe to store (no key: only the name of its variable)."""
        return asdict(self)

    def api_key(self) -> str | None:
        """Read the key from the environment (never stored)."""
        var = self.api_key_env or _default_key_var(self.model)
        key = os.environ.get(var) if var else None
        if key:
            return key
        return "not-needed" if self.api_base else None


def _default_key_var(model: str) -> str | None:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
            "together_ai": "TOGETHERAI_API_KEY", "groq": "GROQ_API_KEY", "mistral": "MISTRAL_API_KEY"}.get(provider)


@dataclass
class RunSummary:
    """What a run did. ``judged + failed`` counts labels; ``requests`` counts HTTP attempts."""

    run_id: str
    rater: str
    tasks: int
    cached: int = 0
    judged: int = 0
    failed: int = 0
    requests: int = 0
    retries: int = 0
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    seconds: float = 0.0

    def render(self) -> str:
        """One paragraph for the terminal."""
        lines = [f"run {self.run_id}: {self.rater}",
                 f"  tasks {self.tasks} (cached {self.cached}), labels judged {self.judged}, failed {self.failed}",
                 f"  HTTP requests {self.requests} (retries {self.retries}), {self.seconds:.1f}s",
                 f"  tokens: prompt {self.prompt_tokens}, completion {self.completion_tokens}"
                 + (f", cost ${self.cost:.4f}" if self.cost is not None else ", cost not reported")]
        if self.failures_by_reason:
            lines.append("  failures: " + ", ".join(f"{k} {v}" for k, v in sorted(self.failures_by_reason.items())))
        return "\n".join(lines)


def cache_key(judge: Judge, lm: LMConfig, inputs: dict[str, str]) -> str:
    """Content hash of one call: same judge version, model, prompt format and inputs -> same answer."""
    blob = json.dumps({"j": judge.name, "v": judge.version, "m": lm.model, "a": lm.adapter, "s": lm.structured,
                       "in": inputs}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class _Outcome:
    task: JudgeTask
    key: str
    raw: str | None
    verdicts: dict[str, Verdict]
    usage: dict[str, Any] | None = None
    cacheable: bool = False
    """Fresh from the provider and fully parsed: worth caching (cached answers are already stored)."""


class _Retryable(Exception):
    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind, self.retry_after = kind, retry_after


def run_judge(db: str | Path, judge: Judge, tasks: Sequence[JudgeTask], lm: LMConfig, *,
              concurrency: int = 8, limit: int | None = None, max_retries: int = 4, backoff_base: float = 0.5,
              backoff_cap: float = 30.0, flush_every: int = 256, flush_seconds: float = 1.0,
              progress: bool = True, source: str = "", seed: int = 0) -> RunSummary:
    """Judge ``tasks`` with ``lm`` and store one label per target item.

    Args:
        db: The DuckDB file; labels land under rater :func:`rater_name` (judge, version, model).
        judge: A registered judge instance.
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

    Returns:
        Counts of what happened.
    """
    chosen = list(tasks)[:limit] if limit is not None else list(tasks)
    keys = {t.key for t in chosen}
    if len(keys) != len(chosen):
        raise ValueError("task keys must be unique within a run")
    rater = rater_name(judge, lm.model)
    run = Run(run_id=f"judge-{uuid.uuid4().hex[:12]}", kind="judge", source=source, rater=rater,
              judge_version=judge.version, git_sha=git_sha(), started_at=now(), status="running",
              parameters={"judge": judge.name, "lm": lm.public(), "concurrency": concurrency, "limit": limit,
                          "max_retries": max_retries, "tasks": len(chosen), "seed": seed})
    summary = RunSummary(run_id=run.run_id, rater=rater, tasks=len(chosen))
    started = time.monotonic()
    task_keys = {t.key: cache_key(judge, lm, t.inputs) for t in chosen}
    with opened(db) as con:
        upsert(con, "runs", [run.model_dump()])
        cached_raw = _cached(con, list(set(task_keys.values())))
    adapter = adapter_for(lm.adapter)

    # Cached answers are re-parsed locally (no request) so their labels are exact even if rows were lost.
    cached_outcomes, pending = [], []
    for t in chosen:
        raw = cached_raw.get(task_keys[t.key])
        if raw is None:
            pending.append(t)
        else:
            cached_outcomes.append(_outcome(judge, adapter, t, task_keys[t.key], raw, None, fresh=False))
    summary.cached = len(cached_outcomes)

    status: Literal["finished", "interrupted", "failed"] = "finished"
    try:
        _write(db, run.run_id, rater, cached_outcomes, summary)
        if pending:
            asyncio.run(_run_pending(db, judge, adapter, lm, pending, task_keys, run.run_id, rater, summary,
                                     concurrency=concurrency, max_retries=max_retries, backoff_base=backoff_base,
                                     backoff_cap=backoff_cap, flush_every=flush_every,
                                     flush_seconds=flush_seconds, progress=progress, rng=random.Random(seed)))
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except BaseException:
        status = "failed"
        raise
    finally:
        summary.seconds = time.monotonic() - started
        finished = run.model_copy(update={"finished_at": now(), "status": status,
                                          "parameters": run.parameters | {"summary": asdict(summary)}})
        with opened(db) as con:
            upsert(con, "runs", [finished.model_dump()])
    return summary


def _cached(con: Any, keys: list[str]) -> dict[str, str]:
    if not keys:
        return {}
    rows = con.execute("SELECT key, raw FROM judge_cache WHERE key IN (SELECT unnest(?))", [keys]).fetchall()
    return {k: r for k, r in rows if r is not None}


def _outcome(judge: Judge, adapter: dspy.Adapter, task: JudgeTask, key: str, raw: str,
             usage: dict[str, Any] | None, *, fresh: bool) -> _Outcome:
    """Parse one raw answer into verdicts: adapter split first, then the judge's pure parser."""
    try:
        fields = adapter.parse(judge.signature, raw)
    except Exception as exc:  # DSPy raises AdapterParseError (and others) on malformed text
        error = f"unparseable: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        return _Outcome(task, key, raw, {t: Verdict(None, None, error) for t in task.targets}, usage)
    verdicts = judge.parse(fields, task)
    missing = set(task.targets) - set(verdicts)
    if missing:
        raise RuntimeError(f"judge {judge.name} returned no verdict for {len(missing)} targets")
    ok = all(v.label is not None for v in verdicts.values())
    return _Outcome(task, key, raw, verdicts, usage, cacheable=ok and fresh)


def _failed(task: JudgeTask, key: str, error: str) -> _Outcome:
    return _Outcome(task, key, None, {t: Verdict(None, None, error) for t in task.targets})


async def _run_pending(db: str | Path, judge: Judge, adapter: dspy.Adapter, lm: LMConfig, pending: list[JudgeTask],
                       task_keys: dict[str, str], run_id: str, rater: str, summary: RunSummary, *,
                       concurrency: int, max_retries: int, backoff_base: float, backoff_cap: float,
                       flush_every: int, flush_seconds: float, progress: bool, rng: random.Random) -> None:
    memoize_pricing_lookup()  # per-call CPU: see judges/lm_overhead.py
    prices = token_prices(lm.model)
    client = dspy.LM(lm.model, api_base=lm.api_base, api_key=lm.api_key(), cache=False, num_retries=0,
                     timeout=lm.timeout, temperature=lm.temperature, max_tokens=lm.max_tokens)
    extra: dict[str, Any] = {}
    wanted = judge.response_format()
    if lm.structured != "off" and wanted is not None:
        extra["response_format"] = response_format_for(lm.structured, wanted)
    todo: asyncio.Queue[JudgeTask] = asyncio.Queue()
    for t in pending:
        todo.put_nowait(t)
    queue: asyncio.Queue[_Outcome | None] = asyncio.Queue()
    bar = tqdm(total=len(pending), desc=f"judging ({judge.name})", unit="call", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)

    async def worker() -> None:
        # A fixed pool of `concurrency` workers, each formatting its next prompt only when it is free:
        # formatting all prompts up front would stall the first requests by seconds on large runs.
        while True:
            try:
                task = todo.get_nowait()
            except asyncio.QueueEmpty:
                return
            await call(task)

    async def call(task: JudgeTask) -> None:
        key = task_keys[task.key]
        messages = adapter.format(judge.signature, demos=[], inputs=task.inputs)
        for attempt in range(max_retries + 1):
            summary.requests += 1
            try:
                raw, usage = await _one_call(client, messages, extra, lm.timeout, prices)
            except _Retryable as exc:
                if attempt == max_retries:
                    await queue.put(_failed(task, key, f"{exc.kind}: {exc} (after {attempt + 1} attempts)"))
                    return
                summary.retries += 1
                delay = min(backoff_cap, backoff_base * 2 ** attempt) * (0.5 + rng.random())
                if exc.retry_after is not None:
                    delay = min(backoff_cap, max(delay, exc.retry_after))
                await asyncio.sleep(delay)
                continue
            except _Fatal as exc:
                await queue.put(_failed(task, key, f"request: {exc}"))
                return
            await queue.put(_outcome(judge, adapter, task, key, raw, usage, fresh=True))
            return

    async def writer() -> None:
        batch: list[_Outcome] = []
        last = time.monotonic()
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=flush_seconds)
            except TimeoutError:
                item = _TICK  # nothing arrived: still flush what waits, so a slow run writes steadily
            if item is None:
                break
            if item is not _TICK:
                batch.append(item)  # type: ignore[arg-type]
                bar.update(1)
            if batch and (len(batch) >= flush_every or time.monotonic() - last >= flush_seconds):
                await asyncio.to_thread(_write, db, run_id, rater, batch, summary)
                batch, last = [], time.monotonic()
        if batch:
            await asyncio.to_thread(_write, db, run_id, rater, batch, summary)

    # DSPy hops to worker threads several times per call; the default pool (cpu + 4 threads) would queue
    # the calls in flight behind each other.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=concurrency + 4))
    writer_task = asyncio.create_task(writer())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # DSPy's notice about messages=; see _one_call
        try:
            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(pending)))))
        finally:
            await queue.put(None)
            await writer_task
            bar.close()


def response_format_for(mode: str, wanted: dict[str, Any]) -> dict[str, Any]:
    """Spell a judge's ``{"type": "json_schema", "name", "schema"}`` the way the server understands it."""
    if mode == "json_object":
        return {"type": "json_object", "schema": wanted["schema"]}
    return {"type": "json_schema", "json_schema": {"name": wanted.get("name", "verdict"), "schema": wanted["schema"]}}


_TICK = _Outcome(JudgeTask(key="", targets=(), inputs={}), "", None, {})


class _Fatal(Exception):
    """A request the provider rejected for good (bad request, auth, unknown model)."""


async def _one_call(client: dspy.LM, messages: list[dict[str, Any]], extra: dict[str, Any],
                    timeout: float, prices: TokenPrices | None) -> tuple[str, dict[str, Any] | None]:
    """One HTTP attempt. Returns (text, usage) or raises _Retryable / _Fatal."""
    from dspy.utils.exceptions import LMError, LMRateLimitError, LMServerError, LMTransportError

    try:
        # aforward returns the OpenAI-shaped response, whose usage we need per call.
        response = await asyncio.wait_for(client.aforward(messages=messages, **extra), timeout=timeout + 5)
    except TimeoutError as exc:
        raise _Retryable("timeout", f"no answer within {timeout:.0f}s") from exc
    except LMRateLimitError as exc:
        raise _Retryable("rate_limited", "HTTP 429", getattr(exc, "retry_after", None)) from exc
    except LMServerError as exc:
        raise _Retryable("server_error", _first_line(exc)) from exc
    except LMTransportError as exc:
        kind = "timeout" if "timed out" in str(exc) else "transport"
        raise _Retryable(kind, _first_line(exc)) from exc
    except LMError as exc:
        raise _Fatal(_first_line(exc)) from exc
    choice = response.choices[0]
    text = getattr(choice.message, "content", None) or ""
    usage = getattr(response, "usage", None)
    usage_dict = None
    if usage is not None:
        prompt_tokens = _get(usage, "prompt_tokens")
        completion_tokens = _get(usage, "completion_tokens")
        usage_dict = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "cost": prices.cost(prompt_tokens, completion_tokens) if prices else None}
    return text, usage_dict


def _get(usage: Any, name: str) -> int:
    value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
    return int(value or 0)


@dataclass(frozen=True)
class TokenPrices:
    """USD per prompt and per completion token."""

    prompt: float
    completion: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The estimated cost of one call."""
        return prompt_tokens * self.prompt + completion_tokens * self.completion


def token_prices(model: str) -> TokenPrices | None:
    """Look up a model's token prices in the price map DSPy ships (LiteLLM's), once per run.

    Providers report tokens, not money: the cost in a run summary is this estimate (tokens x list
    price; no cached-token discounts), and None for a model the map does not list -- a local server's
    served name, say -- rather than a made-up zero.

    Args:
        model: The LiteLLM/DSPy model string, e.g. ``openai/gpt-4o-mini``.
    """
    provider, _, name = model.partition("/") if "/" in model else ("openai", "", model)
    try:
        from dspy.clients.model_metadata import model_info

        info = model_info(provider, name)
    except Exception:  # advisory only: an unreadable map means "cost not known", never a failed run
        return None
    prompt, completion = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if not isinstance(prompt, int | float) or not isinstance(completion, int | float):
        return None
    return TokenPrices(float(prompt), float(completion))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _write(db: str | Path, run_id: str, rater: str, outcomes: Sequence[_Outcome], summary: RunSummary) -> None:
    """Write one batch of outcomes (labels + cache) in one short transaction."""
    if not outcomes:
        return
    labels, cache_rows = [], []
    for o in outcomes:
        for target, v in o.verdicts.items():
            labels.append(Label(item_id=target, rater=rater, rater_kind="llm", condition=o.task.condition,
                                label=v.label, raw=o.raw, reason=v.reason, error=v.error, run_id=run_id,
                                meta=o.task.meta or None))
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
        if o.cacheable:
            name, version, model = rater.split("/", 2)
            cache_rows.append({"key": o.key, "judge": name, "judge_version": int(version.lstrip("v")),
                               "model": model, "label": None, "raw": o.raw, "reason": None,
                               "error": None, "usage": o.usage, "created_at": now()})
    with opened(db) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            write_labels(con, labels)
            upsert(con, "judge_cache", cache_rows)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
