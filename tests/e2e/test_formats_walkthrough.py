"""docs/formats.md's walkthrough, run as written: its example files, its commands, its Python block."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

DOC = REPO / "docs" / "formats.md"
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str, str]]:
    """(language, info after the language, body) of every fenced block in the document."""
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_walkthrough_runs_as_documented(tmp_path: Path) -> None:
    files = {info.removeprefix("file="): body for _, info, body in blocks() if info.startswith("file=")}
    assert set(files) == {"team_relevance.jsonl", "team_pairs.csv", "team_extraction.jsonl"}
    for name, body in files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    commands = [line for lang, info, body in blocks() if lang == "bash" and info == "walkthrough"
                for line in body.splitlines() if line.strip()]
    assert len(commands) >= 8
    exe = Path(sys.executable).parent / "personagap"
    env = os.environ | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    outputs = []
    for command in commands:
        args = shlex.split(command)
        assert args[0] == "personagap"
        done = subprocess.run([str(exe), *args[1:]], cwd=tmp_path, capture_output=True, text=True, env=env,
                              timeout=300, check=False)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)

    # What the walkthrough promises, checked on its own output.
    relevance = outputs[commands.index(next(c for c in commands if c.startswith("personagap report relevance")))]
    assert "gpt-x" in relevance
    extraction = json.loads(outputs[next(i for i, c in enumerate(commands) if "report extraction" in c)])
    assert any(v["verifier"] == "gpt-x" and v["dataset"] == "our-team" for v in extraction["verifiers"])
    merged = json.loads(outputs[-1])
    assert [j["judge"] for j in merged["judges"] if j["dataset"] == "our-team"] == ["gpt-x"]

    (python,) = [body for lang, info, body in blocks() if lang == "python" and info == "walkthrough"]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(python, str(DOC), "exec"), {})  # noqa: S102 - the document's own example
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("name", ["team_relevance.jsonl", "team_pairs.csv", "team_extraction.jsonl"])
def test_every_example_has_several_humans_and_one_llm_per_item(name: str) -> None:
    (body,) = [b for _, info, b in blocks() if info == f"file={name}"]
    if name.endswith(".jsonl"):
        rows = [json.loads(line) for line in body.splitlines()]
    else:
        import csv
        import io

        rows = list(csv.DictReader(io.StringIO(body)))
    items: dict[str, list[str]] = {}
    for r in rows:
        items.setdefault(r["item_id"], []).append(r.get("rater_kind") or "human")
    assert items and all(kinds.count("llm") == 1 and kinds.count("human") >= 2 for kinds in items.values())
