"""The judge runner against a real HTTP server on 127.0.0.1: faults, retries, cache, resume, secrets."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from personagap import api
from personagap.judges import get_judge
from personagap.judges.base import JudgeTask
from personagap.judges.runner import LMConfig
from tests.llm_server import Reply, ScriptedOpenAIServer, last_user_message

MODEL = "openai/scripted"


def _bucket(body: dict) -> int:
    """Deterministic per-item fault bucket from the prompt text."""
    return hashlib.sha256(last_user_message(body).encode()).digest()[0] % 10


def _good(body: dict) -> str:
    h = hashlib.sha256(last_user_message(body).encode()).digest()[1]
    return json.dumps({"reason": "scripted", "answer": "YES" if h % 3 == 0 else "NO"})


def _labels(db: Path, rater_prefix: str = "relevance-per-attribute/v1/") -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT item_id, label, error, raw FROM labels WHERE rater LIKE ? || '%'",
                           [rater_prefix]).fetchall()
    finally:
        con.close()


class FaultyScript:
    """Bucket 0: HTTP 500 on first attempt; 1: 429 + Retry-After on first attempt; 2: always slower than the
    timeout; 3: unparseable text; others: a good answer."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()

    def __call__(self, body: dict) -> Reply | str:
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

    # Rerun against a healthy server: requests only for the failed items.
    with ScriptedOpenAIServer(_good) as healthy:
        second = api.judge_relevance(db, "relevance-per-attribute",
                                     LMConfig(model=MODEL, api_base=healthy.base_url, timeout=5), limit=60,
                                     progress=False)
        assert healthy.count == first.failed
        assert second.cached == 60 - first.failed
    rows = _labels(db)
    assert len(rows) == 60 and all(label in ("yes", "no") for _, label, _, _ in rows)

    # Everything cached: no request at all.
    with ScriptedOpenAIServer(_good) as idle:
        third = api.judge_relevance(db, "relevance-per-attribute", LMConfig(model=MODEL, api_base=idle.base_url),
                                    limit=60, progress=False)
        assert idle.count == 0
        assert third.cached == 60 and third.judged == 60
    con = duckdb.connect(str(db), read_only=True)
    runs = con.execute("SELECT status, parameters FROM runs WHERE kind = 'judge' ORDER BY started_at").fetchall()
    con.close()
    assert [s for s, _ in runs] == ["finished"] * 3
    assert json.loads(runs[0][1])["judge"] == "relevance-per-attribute"


def test_report_lists_live_judge_with_failures(recenter_db_copy: Path) -> None:
    with ScriptedOpenAIServer(lambda b: "no idea" if _bucket(b) == 3 else _good(b)) as server:
        api.judge_relevance(recenter_db_copy, "relevance-per-attribute",
                            LMConfig(model=MODEL, api_base=server.base_url), limit=80, progress=False)
    report = api.report_relevance(recenter_db_copy, n_resamples=50)
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


def test_killed_run_resumes_to_exact_counts(recenter_db_copy: Path, tmp_path: Path) -> None:
    def slow(body: dict) -> Reply:
        return Reply(text=_good(body), delay=0.05)

    exe = Path(sys.executable).with_name("personagap")
    total = 200
    with ScriptedOpenAIServer(slow) as server:
        cmd = [str(exe), "judge", "relevance", "--db", str(recenter_db_copy), "--model", MODEL, "--api-base",
               server.base_url, "--limit", str(total), "--concurrency", "2", "--no-progress"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        # Past the runner's 1 s flush interval, so some results are on disk when it dies.
        while server.count < 80 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        sent_before_kill = server.count
    assert 80 <= sent_before_kill < total
    written = len(_labels(recenter_db_copy))
    assert 0 < written <= sent_before_kill
    with ScriptedOpenAIServer(_good) as server:
        summary = api.judge_relevance(recenter_db_copy, "relevance-per-attribute",
                                      LMConfig(model=MODEL, api_base=server.base_url), limit=total, progress=False)
        assert server.count == total - written  # only the missing items are asked again
    assert summary.cached == written
    rows = _labels(recenter_db_copy)
    assert len(rows) == total == len({r[0] for r in rows})
    assert all(label is not None for _, label, _, _ in rows)
    con = duckdb.connect(str(recenter_db_copy), read_only=True)
    rows = con.execute("SELECT status FROM runs WHERE kind = 'judge' ORDER BY started_at").fetchall()
    statuses = [s for (s,) in rows]
    con.close()
    assert statuses == ["running", "finished"]  # the killed run is visible as never finished


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
    report = subprocess.run([str(exe), "report", "relevance", "--db", str(recenter_db_copy), "--json",
                             "--resamples", "20"], capture_output=True, text=True, env=env, timeout=120)
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
