"""The judge runner against a real HTTP server on 127.0.0.1: faults, retries, cache, resume, secrets."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from personagap import api
from personagap.judges import get_judge
from personagap.judges.base import Judge, JudgeTask, Program
from personagap.judges.relevance import RelevancePerAttribute, relevance_tasks
from personagap.judges.runner import LMConfig, RunSummary, run_judge
from personagap.liveness import effective_status
from tests.support.db_files import HOLDER
from tests.support.openai_server import Reply, ScriptedOpenAIServer, last_user_message

MODEL = "openai/scripted"


def _bucket(body: dict) -> int:
    """Deterministic per-item fault bucket from the prompt text."""
    return hashlib.sha256(last_user_message(body).encode()).digest()[0] % 10


def _good(body: dict) -> str:
    h = hashlib.sha256(last_user_message(body).encode()).digest()[1]
    return json.dumps({"reason": "scripted", "answer": "YES" if h % 3 == 0 else "NO"})


def _query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _labels(db: Path, rater_prefix: str = "relevance-per-attribute/v1/") -> list[tuple]:
    return _query(db, "SELECT item_id, label, error, raw FROM labels WHERE rater LIKE ? || '%'", [rater_prefix])


class FaultyScript:
    """Bucket 0: HTTP 500 on first attempt; 1: 429 + Retry-After on first attempt; 2: always slower than the
    timeout; 3: unparseable text; others: a good answer."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        self.healthy = False

    def __call__(self, body: dict) -> Reply | str:
        if self.healthy:
            return _good(body)
        key = last_user_message(body)
        self.attempts[key] += 1
        bucket = _bucket(body)
        if bucket == 0 and self.attempts[key] == 1:
            return Reply(status=500)
        if bucket == 1 and self.attempts[key] == 1:
            return Reply(status=429, headers={"Retry-After": "1"})
        if bucket == 2:
            return Reply(text=_good(body), delay=1.5)
        if bucket == 3:
            return "Well, it depends on the user."
        return _good(body)


@pytest.mark.slow
def test_faults_then_rerun_then_cached_rerun(recenter_db_copy: Path) -> None:
    db = recenter_db_copy
    script = FaultyScript()
    with ScriptedOpenAIServer(script) as server:
        lm = LMConfig(model=MODEL, api_base=server.base_url, timeout=0.5)
        first = api.judge_relevance(db, "relevance-per-attribute", lm, limit=60, concurrency=8, max_retries=2,
                                    progress=False)
        rows = _labels(db)
        # Every item ends judged or failed-with-reason, exactly once.
        assert len(rows) == 60 == len({r[0] for r in rows})
        assert all((label is None) == (error is not None) for _, label, error, _ in rows)
        kinds = Counter(error.split(":")[0] for _, _, error, _ in rows if error)
        buckets = Counter(_bucket(b) for b in server.requests)
        assert kinds["timeout"] == len({last_user_message(b) for b in server.requests if _bucket(b) == 2})
        assert kinds["unparseable"] == len({last_user_message(b) for b in server.requests if _bucket(b) == 3})
        assert set(kinds) <= {"timeout", "unparseable"}  # 500s and 429s were retried into answers
        assert buckets[0] > 0 and buckets[1] > 0  # the faults really happened
        unparseable = [raw for _, _, error, raw in rows if error and error.startswith("unparseable")]
        assert all(raw == "Well, it depends on the user." for raw in unparseable)
        assert first.failed == sum(kinds.values()) and first.judged == 60 - first.failed

        # 429 with Retry-After: 1 -> the retry came at least ~1 s after the refusal.
        for key in {last_user_message(b) for b in server.requests if _bucket(b) == 1}:
            times = [t for b, t in zip(server.requests, server.times, strict=True) if last_user_message(b) == key]
            assert times[1] - times[0] >= 0.9

        # The same server, healthy now: a rerun sends requests only for the failed items (the cache is per
        # server, so the rerun must go to the one that answered).
        script.healthy = True
        before = server.count
        second = api.judge_relevance(db, "relevance-per-attribute",
                                     LMConfig(model=MODEL, api_base=server.base_url, timeout=5), limit=60,
                                     progress=False)
        assert server.count - before == first.failed
        assert second.cached == 60 - first.failed
        rows = _labels(db)
        assert len(rows) == 60 and all(label in ("yes", "no") for _, label, _, _ in rows)

        # Everything cached: no request at all.
        before = server.count
        third = api.judge_relevance(db, "relevance-per-attribute", LMConfig(model=MODEL, api_base=server.base_url),
                                    limit=60, progress=False)
        assert server.count == before
        assert third.cached == 60 and third.judged == 60
        assert "60 answered from the cache (no request), 0 sent" in third.render()
    con = duckdb.connect(str(db), read_only=True)
    runs = con.execute("SELECT status, parameters FROM runs WHERE kind = 'judge' ORDER BY started_at").fetchall()
    con.close()
    assert [s for s, _ in runs] == ["finished"] * 3
    assert json.loads(runs[0][1])["judge"] == "relevance-per-attribute"


def test_report_lists_live_judge_with_failures(recenter_db_copy: Path) -> None:
    with ScriptedOpenAIServer(lambda b: "no idea" if _bucket(b) == 3 else _good(b)) as server:
        api.judge_relevance(recenter_db_copy, "relevance-per-attribute",
                            LMConfig(model=MODEL, api_base=server.base_url), limit=80, progress=False)
    report = api.report_relevance(recenter_db_copy)
    (live,) = [j for j in report.judges if j.judge.startswith("relevance-per-attribute/v1/")]
    assert live.failures > 0 and live.failure_reasons == {"unparseable": live.failures}
    assert live.n + live.unmatched + live.failures == 80  # unmatched: prompts the humans did not label
    assert {j.judge for j in report.judges} >= {"gpt-5.4", "google_gemma-4-31b-it"}


def test_batched_judge_labels_every_attribute_of_a_prompt(recenter_db_copy: Path) -> None:
    def answer(body: dict) -> str:
        return json.dumps({"reason": "scripted", "relevant": [1, 3]})

    with ScriptedOpenAIServer(answer) as server:
        summary = api.judge_relevance(recenter_db_copy, "relevance-batched",
                                      LMConfig(model=MODEL, api_base=server.base_url), limit=3, progress=False)
        assert server.count == 3
    rows = _labels(recenter_db_copy, "relevance-batched/v1/")
    assert len(rows) == summary.judged > 3
    assert Counter(label for _, label, _, _ in rows)["yes"] == 6


def _cli(db: Path, base_url: str, limit: int, concurrency: int) -> list[str]:
    exe = Path(sys.executable).with_name("personagap")
    return [str(exe), "judge", "relevance", "--db", str(db), "--model", MODEL, "--api-base", base_url,
            "--limit", str(limit), "--concurrency", str(concurrency), "--no-progress"]


def _wait_for(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def _runs(db: Path) -> list[tuple[str, str, dict]]:
    rows = _query(db, "SELECT run_id, status, CAST(parameters AS TEXT) FROM runs WHERE kind = 'judge' "
                      "ORDER BY started_at")
    return [(run_id, status, json.loads(params)) for run_id, status, params in rows]


@pytest.mark.slow
def test_cache_key_covers_everything_that_can_change_an_answer(recenter_db_copy: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Judged by what was sent: a setting is in the key iff changing it makes the server receive requests."""
    db, n = recenter_db_copy, 12

    def judge(lm: LMConfig, judge_: Judge | None = None) -> RunSummary:
        judge_ = judge_ or get_judge("relevance-per-attribute")
        return run_judge(db, judge_, relevance_tasks(judge_, api.relevance_items(db)), lm, limit=n, progress=False)

    with ScriptedOpenAIServer(_good) as first, ScriptedOpenAIServer(_good) as second:
        base = LMConfig(model=MODEL, api_base=first.base_url)
        assert judge(base).cached == 0 and first.count == n
        # The same --model on another server is another source of answers: asked again, nothing reused.
        other = judge(LMConfig(model=MODEL, api_base=second.base_url))
        assert second.count == n and other.cached == 0
        # The same server again (a trailing slash is the same URL), another timeout, another key: all cached.
        monkeypatch.setenv("OPENAI_API_KEY", "sk-another-key")
        again = judge(LMConfig(model=MODEL, api_base=first.base_url + "/", timeout=7))
        assert first.count == n and again.cached == n and f"{n} answered from the cache" in again.render()

        variants: dict[str, tuple[LMConfig, Judge | None]] = {
            "max_tokens": (replace(base, max_tokens=256), None),
            "temperature": (replace(base, temperature=0.7), None),
            "structured": (replace(base, structured="json_schema"), None),
            "adapter": (replace(base, adapter="chat"), None),
            "demos": (base, _WithDemo()),
            "instructions": (base, _WithInstructions()),
        }
        for name, (lm, judge_) in variants.items():
            before = first.count
            summary = judge(lm, judge_)
            assert first.count - before == n and summary.cached == 0, name
        sent = first.requests
        # LiteLLM spells the cap max_completion_tokens for OpenAI-style servers.
        assert {b.get("max_completion_tokens", b.get("max_tokens")) for b in sent} >= {512, 256}
        assert {b.get("temperature") for b in sent} >= {0.0, 0.7}
        assert any("response_format" in b for b in sent)
        assert any(_DEMO_ATTRIBUTE in json.dumps(b) for b in sent)
        assert any(_INSTRUCTIONS in json.dumps(b) for b in sent)


_DEMO_ATTRIBUTE = "The user keeps bees on a rooftop."
_INSTRUCTIONS = "Decide strictly whether the attribute changes the best answer."


class _WithDemo(RelevancePerAttribute):
    """The plain judge with one few-shot demo, as an optimiser would produce."""

    def program(self) -> Program:
        demo = {"prompt": "Which honey should I buy?", "attribute": _DEMO_ATTRIBUTE, "reason": "r", "answer": "YES"}
        return Program(self.signature, demos=(demo,))


class _WithInstructions(RelevancePerAttribute):
    """The plain judge with rewritten instructions, as an optimiser would produce."""

    def program(self) -> Program:
        return Program(self.signature.with_instructions(_INSTRUCTIONS))


@pytest.mark.slow
def test_sigkill_loses_at_most_the_calls_in_flight(recenter_db_copy: Path) -> None:
    """A SIGKILLed run costs at most `concurrency` calls asked again on resume; its row stops saying running."""
    db, total, concurrency = recenter_db_copy, 240, 4
    with ScriptedOpenAIServer(lambda body: Reply(text=_good(body), delay=0.03)) as server:
        proc = subprocess.Popen(_cli(db, server.base_url, total, concurrency), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        _wait_for(lambda: server.count >= 100)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        sent_before_kill = server.count
        assert sent_before_kill < total
        ((killed, status, params),) = _runs(db)

        summary = api.judge_relevance(db, "relevance-per-attribute", LMConfig(model=MODEL, api_base=server.base_url),
                                      limit=total, concurrency=concurrency, progress=False)
        asked_again = server.count - total  # every task asked once, plus the answers the kill lost
        assert 0 <= asked_again <= concurrency
        assert summary.requests == total - summary.cached
        # Before the resume, the killed run's row said 'running', and a reader already showed it interrupted.
        assert status == "running" and params["process"]["pid"] == proc.pid
        assert effective_status(status, params) == "interrupted"
        assert summary.interrupted_runs == [killed]
        # Every answer the killed run received was in its journal (also those not yet in the database).
        assert summary.recovered == {killed: summary.cached} and summary.cached >= sent_before_kill - concurrency
    rows = _labels(db)
    assert len(rows) == total == len({r[0] for r in rows})
    assert all(label is not None for _, label, _, _ in rows)
    assert [status for _, status, _ in _runs(db)] == ["interrupted", "finished"]
    assert not list(db.parent.glob("*.journal"))  # the killed run's journal was stored, then removed


@pytest.mark.slow
def test_locked_database_loses_no_paid_answer(recenter_db_copy: Path) -> None:
    """Another process holds the database past the store's lock wait: every answer the server sent is stored."""
    db, total = recenter_db_copy, 400  # ~3 s of calls: the lock surely comes before the last one
    with ScriptedOpenAIServer(lambda body: Reply(text=_good(body), delay=0.03)) as server:
        proc = subprocess.Popen(_cli(db, server.base_url, total, 4), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: server.count >= 20)
        # Held for longer than a store connection waits for a lock (10 s), as a long-lived writer would.
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), "12"], stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "LOCKED"
        sent_at_lock = server.count
        out, err = proc.communicate(timeout=120)
        assert holder.wait(timeout=30) == 0
        sent = server.count
    assert proc.returncode == 0, err
    assert sent_at_lock < total  # the lock really came mid-run
    assert "is locked by another process" in err and "none lost" in err  # the user was told
    assert "locked by another process for" in out
    assert sent == total  # no call was paid twice...
    rows = _labels(db)
    assert len(rows) == total and all(label is not None for _, label, _, _ in rows)  # ...and none was lost
    assert [status for _, status, _ in _runs(db)] == ["finished"]
    assert not list(db.parent.glob("*.journal"))


SQL_WHEN_FREE = textwrap.dedent("""
    import sys, time, duckdb
    while True:  # between two of the judge run's batches
        try:
            con = duckdb.connect(sys.argv[1])
            break
        except duckdb.IOException:
            time.sleep(0.005)
    con.execute(sys.argv[2])
    con.close()
""")


@pytest.mark.slow
def test_failed_write_stops_the_run_at_once_and_keeps_its_answers(recenter_db_copy: Path) -> None:
    """A write that cannot succeed (not a lock) stops new calls at once; the next run stores what was paid."""
    db, total, concurrency = recenter_db_copy, 800, 4  # ~6 s of calls if nothing stopped them
    with ScriptedOpenAIServer(lambda body: Reply(text=_good(body), delay=0.03)) as server:
        proc = subprocess.Popen(_cli(db, server.base_url, total, concurrency), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: server.count >= 40)
        # Another process breaks the cache table between two batches: every later write fails.
        subprocess.run([sys.executable, "-c", SQL_WHEN_FREE, str(db),
                        "ALTER TABLE judge_cache RENAME TO judge_cache_moved"], check=True, timeout=60)
        broken = time.monotonic()
        out, err = proc.communicate(timeout=120)
        sent_by_failed_run = server.count
        last_call = max(server.times)
        assert proc.returncode == 2
        last = err.strip().splitlines()[-1]  # the CLI's one line (a note above it said so as it happened)
        assert "Traceback" not in err and "run stopped: cannot write answers" in last and ".journal" in last
        # At once: no call starts later than the next batch (1 s) plus the calls in flight need.
        assert sent_by_failed_run < total and last_call - broken < 3.0

        subprocess.run([sys.executable, "-c", SQL_WHEN_FREE, str(db),
                        "ALTER TABLE judge_cache_moved RENAME TO judge_cache"], check=True, timeout=60)
        resumed = api.judge_relevance(db, "relevance-per-attribute", LMConfig(model=MODEL, api_base=server.base_url),
                                      limit=total, concurrency=concurrency, progress=False)
        assert server.count == total  # every answer the stopped run paid for was kept: none asked twice
        assert resumed.cached == sent_by_failed_run
    rows = _labels(db)
    assert len(rows) == total and all(label is not None for _, label, _, _ in rows)
    # The broken database refused the stopped run's final status too; the next run found its process gone.
    assert [status for _, status, _ in _runs(db)] == ["interrupted", "finished"]
    assert not list(db.parent.glob("*.journal"))


@pytest.mark.slow
def test_api_key_is_used_but_never_stored_or_printed(recenter_db_copy: Path, tmp_path: Path) -> None:
    sentinel = "sk-SENTINEL-7f3a9c"
    exe = Path(sys.executable).with_name("personagap")
    env = {**os.environ, "OPENAI_API_KEY": sentinel}
    with ScriptedOpenAIServer(lambda b: "garbage" if _bucket(b) == 3 else _good(b)) as server:
        out = subprocess.run([str(exe), "judge", "relevance", "--db", str(recenter_db_copy), "--model", MODEL,
                              "--api-base", server.base_url, "--limit", "30"], capture_output=True, text=True,
                             env=env, timeout=120)
        auth = {h.get("Authorization") or h.get("authorization") for h in server.headers_seen}
    assert out.returncode == 0, out.stderr
    assert auth == {f"Bearer {sentinel}"}  # the key did reach the provider
    report = subprocess.run([str(exe), "report", "relevance", "--db", str(recenter_db_copy), "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    for text in (out.stdout, out.stderr, report.stdout, report.stderr):
        assert sentinel not in text
    for path in recenter_db_copy.parent.iterdir():  # the database and any WAL beside it
        assert sentinel.encode() not in path.read_bytes()


def test_relevance_parsers_are_pure() -> None:
    per = get_judge("relevance-per-attribute")
    task = JudgeTask(key="k", targets=("i1",), inputs={"prompt": "p", "attribute": "a"})
    assert per.parse({"answer": "YES", "reason": "r"}, task)["i1"].label == "yes"
    assert per.parse({"answer": " no. ", "reason": "r"}, task)["i1"].label == "no"
    bad = per.parse({"answer": "maybe", "reason": "r"}, task)["i1"]
    assert bad.label is None and bad.error.startswith("unparseable")
    batched = get_judge("relevance-batched")
    task3 = JudgeTask(key="k", targets=("a", "b", "c"), inputs={"prompt": "p", "attributes": "1. x\n2. y\n3. z"})
    assert {k: v.label for k, v in batched.parse({"relevant": [2], "reason": ""}, task3).items()} == \
        {"a": "no", "b": "yes", "c": "no"}
    out_of_range = batched.parse({"relevant": [4], "reason": ""}, task3)
    assert all(v.label is None and v.error.startswith("invalid") for v in out_of_range.values())
    assert all(v.label is None for v in batched.parse({"relevant": "2", "reason": ""}, task3).values())


def test_unknown_judge_suggests_names() -> None:
    with pytest.raises(KeyError, match="did you mean relevance-batched"):
        get_judge("relevance-batchd")
