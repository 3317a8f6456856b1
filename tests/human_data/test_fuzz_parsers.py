"""Fuzzing the release parsers: any bytes give parsed rows or a DataError, never another exception.

Three layers: raw bytes into the JSONL/JSON readers; byte-level mutations of a valid release file;
and structure-aware mutations (one field of one row replaced by an arbitrary JSON value, or
dropped) run through each importer and, when accepted, written to DuckDB, where a value that
passed validation must not crash the write.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personagap.human_data._jsonl import DataError, parse_json, read_jsonl
from personagap.store import write_batch
from tests.support.release_builders import IMPORTERS, LOADERS, encode, write_release

# FUZZ_EXAMPLES=500 for a longer hunt; the default keeps the suite fast.
FAST = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "25")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
    | st.sampled_from(["", " ", "A", "B", "C", "yes", "ok", "User", "u1", "0", "\u0000", "\ud7ff\ue000"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_jsonl_reader_on_any_bytes(data: bytes) -> None:
    try:
        rows = list(read_jsonl("fuzz.jsonl", data))
    except DataError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.jsonl")
        return
    assert all(isinstance(r.data, dict) for r in rows)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_json_reader_on_any_bytes(data: bytes) -> None:
    try:
        parse_json("fuzz.json", data)
    except DataError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.json")


def _load_and_write(name: str, root: Path, db: Path) -> None:
    """Load a release; if it is accepted, writing it must succeed too."""
    try:
        result = LOADERS[name](root)
    except DataError as exc:
        assert "\n" not in str(exc)
        return
    write_batch(db, result.batch)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


DROP = object()


@st.composite
def field_mutation(draw: st.DrawFn, name: str) -> tuple[str, Any]:
    """A valid release of importer ``name`` with one field of one file replaced (or dropped)."""
    files = IMPORTERS[name].build()
    rel = draw(st.sampled_from(sorted(files)))
    paths = _paths(files[rel])
    path = draw(st.sampled_from(paths))
    value = draw(json_values | st.just(DROP))
    target = files[rel]
    for key in path[:-1]:
        target = target[key]
    if value is DROP:
        if isinstance(target, dict):
            del target[path[-1]]
        else:
            target.pop(path[-1])
    else:
        target[path[-1]] = value
    return rel, files


@st.composite
def byte_mutation(draw: st.DrawFn, name: str) -> tuple[str, bytes, dict[str, Any]]:
    """A valid release of importer ``name`` with some bytes of one file overwritten, inserted or deleted."""
    files = IMPORTERS[name].build()
    rel = draw(st.sampled_from(sorted(files)))
    data = bytearray(encode(rel, files[rel]))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        op = draw(st.sampled_from(["set", "insert", "delete"]))
        chunk = draw(st.binary(min_size=1, max_size=4))
        if op == "set":
            data[at:at + len(chunk)] = chunk
        elif op == "insert":
            data[at:at] = chunk
        else:
            del data[at:at + len(chunk)]
    return rel, bytes(data), files


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOADERS))
def test_importers_on_field_mutations(name: str, tmp_path: Path) -> None:
    db = tmp_path / "fuzz.duckdb"

    @FAST
    @given(field_mutation(name))
    def check(mutation: tuple[str, Any]) -> None:
        _, files = mutation
        with tempfile.TemporaryDirectory() as tmp:
            _load_and_write(name, write_release(Path(tmp), files), db)

    check()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOADERS))
def test_importers_on_byte_mutations(name: str, tmp_path: Path) -> None:
    db = tmp_path / "fuzz.duckdb"

    @FAST
    @given(byte_mutation(name))
    def check(mutation: tuple[str, bytes, dict[str, Any]]) -> None:
        rel, data, files = mutation
        with tempfile.TemporaryDirectory() as tmp:
            root = write_release(Path(tmp), files)
            (root / rel).write_bytes(data)
            _load_and_write(name, root, db)

    check()


def test_the_strategies_reach_valid_releases(tmp_path: Path) -> None:
    # The fuzz tests are only worth something if unmutated releases pass: check that baseline.
    for name in LOADERS:
        root = write_release(tmp_path / name, IMPORTERS[name].build())
        result = LOADERS[name](root)
        assert result.batch.counts()["items"] > 0, name
    assert json.loads(json.dumps({"k": 1})) == {"k": 1}
