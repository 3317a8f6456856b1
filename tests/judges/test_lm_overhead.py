"""The runner's CPU savings change nothing DSPy would send or parse; cost estimates come from DSPy's price map."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from personagap.judges import JUDGES, get_judge
from personagap.judges.base import JudgeTask
from personagap.judges.lm_overhead import adapter_for, memoize_pricing_lookup
from personagap.judges.runner import LMConfig, run_judge, token_prices
from personagap.records import Item
from personagap.store import ImportBatch, write_batch
from tests.support.openai_server import ScriptedOpenAIServer


@pytest.mark.parametrize("kind", ["json", "chat"])
@pytest.mark.parametrize("name", sorted(JUDGES))
def test_adapter_for_formats_and_parses_exactly_like_dspy(name: str, kind: str) -> None:
    judge = get_judge(name)
    ours, theirs = adapter_for(kind), dspy.JSONAdapter() if kind == "json" else dspy.ChatAdapter()  # type: ignore[arg-type]
    for n in range(3):  # the second and third calls are served from the memo
        inputs = {field: f"{field} number {n} with text" for field in judge.signature.input_fields}
        assert ours.format(judge.signature, demos=[], inputs=inputs) == theirs.format(judge.signature, demos=[],
                                                                                       inputs=inputs)
    outputs = {field: "yes" for field in judge.signature.output_fields}
    raw = json.dumps(outputs) if kind == "json" else "".join(f"[[ ## {k} ## ]]\n{v}\n\n" for k, v in outputs.items())
    assert _parsed(ours, judge.signature, raw) == _parsed(theirs, judge.signature, raw)
    assert _parsed(ours, judge.signature, "not an answer") == _parsed(theirs, judge.signature, "not an answer")


def _parsed(adapter: dspy.Adapter, signature: type[dspy.Signature], raw: str) -> object:
    try:
        return adapter.parse(signature, raw)
    except Exception as exc:  # compare failure kinds too
        return type(exc).__name__


def test_memoized_pricing_lookup_returns_what_dspy_returns() -> None:
    from dspy.clients import costs

    assert memoize_pricing_lookup() is True
    lookup = costs.model_info
    assert memoize_pricing_lookup() is True and costs.model_info is lookup  # idempotent: wrapped once
    original = lookup.__wrapped__
    cases = [("openai", "gpt-4o-mini", None), ("openai", "a-local-served-name", None),
             ("openai", "gpt-4o-mini", ("openai",)), ("openai", "gpt-4o-mini", ())]
    for provider, model, namespaces in cases:
        first = lookup(provider, model, namespaces=namespaces)
        assert first == original(provider, model, namespaces=namespaces)
        first["input_cost_per_token"] = -1.0  # a caller mutating its copy must not poison the memo
        assert lookup(provider, model, namespaces=namespaces) == original(provider, model, namespaces=namespaces)
    assert lookup("openai", "gpt-4o-mini").get("input_cost_per_token")  # the known model still has its prices


def test_run_cost_is_tokens_times_list_price_and_unknown_models_have_none(tmp_path: Path) -> None:
    from dspy.clients.model_metadata import model_info

    known = model_info("openai", "gpt-4o-mini")
    prices = token_prices("openai/gpt-4o-mini")
    assert prices is not None
    assert (prices.prompt, prices.completion) == (known["input_cost_per_token"], known["output_cost_per_token"])
    assert token_prices("openai/a-local-served-name") is None

    db = tmp_path / "cost.duckdb"
    batch = ImportBatch()
    for i in range(4):
        batch.items[f"c{i}"] = Item(item_id=f"c{i}", dataset="cost", stage="relevance", user_id="u", prompt_index=0,
                                    attribute=f"The user likes thing {i}.")
    write_batch(db, batch)
    tasks = [JudgeTask(key=iid, targets=(iid,), inputs={"prompt": "Plan a trip", "attribute": it.attribute or ""})
             for iid, it in batch.items.items()]
    answer = json.dumps({"reason": "scripted", "answer": "NO"})
    with ScriptedOpenAIServer(lambda body: answer, model="gpt-4o-mini") as server:
        priced = run_judge(db, get_judge("relevance-per-attribute"), tasks,
                           LMConfig(model="openai/gpt-4o-mini", api_base=server.base_url), progress=False)
        unpriced = run_judge(db, get_judge("relevance-per-attribute"), tasks,
                             LMConfig(model="openai/a-local-served-name", api_base=server.base_url), progress=False)
    assert priced.judged == unpriced.judged == 4
    assert priced.prompt_tokens > 0 and priced.completion_tokens > 0
    assert priced.cost == pytest.approx(priced.prompt_tokens * prices.prompt
                                        + priced.completion_tokens * prices.completion)
    assert unpriced.prompt_tokens > 0 and unpriced.cost is None
    assert "cost not reported" in unpriced.render()
