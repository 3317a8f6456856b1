"""Judge runs over the real loopback server: a run whose every call fails is 'failed' and exits non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from click.testing import CliRunner

from personagap.cli import cli
from tests.support.openai_server import ScriptedOpenAIServer

N = 6


def _runs(db: Path) -> list[tuple[str, str]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return [(str(r), str(s)) for r, s in con.execute("SELECT run_id, status FROM runs WHERE kind = 'judge' "
                                                         "ORDER BY started_at").fetchall()]
    finally:
        con.close()


def _judge(db: Path, base_url: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["judge", "relevance", "--db", str(db), "--model", "openai/scripted",
                                      "--api-base", base_url, "--limit", str(N), "--no-progress"])
    return result.exit_code, result.stdout, result.stderr


def test_a_run_whose_every_answer_is_garbage_fails_and_exits_non_zero(recenter_db_copy: Path) -> None:
    with ScriptedOpenAIServer(lambda body: "I would rather not say.") as server:
        code, out, err = _judge(recenter_db_copy, server.base_url)
        assert server.count == N  # every call really reached the server and got an answer
    assert code == 1, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "failed" in lines[0] and f"every one of its {N} labels failed" in lines[0]
    assert "Traceback" not in out + err
    assert _runs(recenter_db_copy)[-1][1] == "failed"


def test_a_partial_failure_finishes_with_exit_0_and_counts_its_failures(recenter_db_copy: Path) -> None:
    answers = iter(["garbage"] + [json.dumps({"reason": "r", "answer": "NO"})] * (N - 1))
    with ScriptedOpenAIServer(lambda body: next(answers)) as server:
        code, out, err = _judge(recenter_db_copy, server.base_url + "/")
        assert server.count == N
    assert code == 0, (out, err)
    assert f"labels judged {N - 1}, failed 1" in out and "unparseable 1" in out
    assert _runs(recenter_db_copy)[-1][1] == "finished"
