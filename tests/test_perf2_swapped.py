"""swapped_flags: each distinct meta text parsed once, the same flags as reading every row."""

from __future__ import annotations

import json

import pandas as pd

from personagap.stages.response_pairwise import swapped_flags


def test_flags_from_dicts_texts_and_missing_meta() -> None:
    on, off = json.dumps({"swapped": True, "seed": 1}), json.dumps({"seed": 2})
    meta = pd.Series([on, None, off, on, {"swapped": True}, "", {}, on, off], dtype=object)
    expected = [True, False, False, True, True, False, False, True, False]
    assert swapped_flags(meta).tolist() == expected


def test_arrow_text_gives_the_same_flags() -> None:
    on = json.dumps({"swapped": True})
    meta = pd.Series([on, None, on, json.dumps({"swapped": False})], dtype="string[pyarrow]")
    assert swapped_flags(meta).tolist() == [True, False, True, False]
