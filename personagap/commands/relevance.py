"""Stage 2 commands: import recenter, report relevance."""

from __future__ import annotations

import json
from pathlib import Path

import click

from personagap import api
from personagap._cli_base import db_option, demo_step, import_group, judge_group, report_group, run_or_exit
from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.stages.relevance import render_relevance


@import_group.command("recenter")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@db_option
def import_recenter(path: str, db: str) -> None:
    """Import a Re-Centering release folder (stage2/ and/or pilot/, laid out as shared/data/recenter).

    Validates every file first; on any malformed row it names file, line and field and writes nothing.
    Re-importing the same files is idempotent.
    """
    click.echo(run_or_exit(lambda: api.import_recenter(path, db)).render())


@report_group.command("relevance")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@click.option("--resamples", type=click.IntRange(min=10), default=DEFAULT_RESAMPLES, show_default=True,
              help="Bootstrap resamples (whole users are resampled) for every 95% CI.")
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Bootstrap seed.")
def report_relevance(db: str, as_json: bool, resamples: int, seed: int) -> None:
    """Stage 2: per judge, kappa vs the human majority with CI, over-selection, precision/recall/F1;
    then the pilot's human-human, LLM-LLM and human-LLM agreement."""
    result = run_or_exit(lambda: api.report_relevance(db, n_resamples=resamples, seed=seed))
    click.echo(json.dumps(result.to_json_dict(), indent=2) if as_json else render_relevance(result))


@demo_step("Stage 2 — relevance selection")
def demo_relevance(workdir: Path, db: Path) -> str:
    """Import the sample Re-Centering-format release and report stage 2."""
    from personagap.sample_data import write_sample_release

    release = write_sample_release(workdir / "sample_recenter")
    summary = api.import_recenter(release, db)
    return summary.render() + "\n\n" + render_relevance(api.report_relevance(db))


@judge_group.command("relevance")
@click.option("--model", required=True, help="LiteLLM/DSPy model string, e.g. openai/gpt-4o-mini, or "
              "openai/<served-name> with --api-base for a local OpenAI-compatible server.")
@click.option("--api-base", default=None, help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1.")
@click.option("--api-key-env", default=None, help="Environment variable holding the API key "
              "[default: the provider's, e.g. OPENAI_API_KEY]. The key is never stored.")
@click.option("--judge", "judge_name", type=click.Choice(["relevance-per-attribute", "relevance-batched"]),
              default="relevance-per-attribute", show_default=True,
              help="Per attribute: one YES/NO call per (user, prompt, attribute), the study's protocol. "
                   "Batched: one call per (user, prompt) returning the relevant subset.")
@click.option("--dataset", "datasets", multiple=True, default=("recenter-stage2",), show_default=True,
              help="Which imported dataset's items to judge (repeatable).")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Calls in flight.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Judge only the first N calls.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True, help="Seconds per call.")
@click.option("--max-retries", type=click.IntRange(min=0), default=4, show_default=True,
              help="Retries on HTTP 429/5xx and timeouts (exponential backoff with jitter; Retry-After honoured).")
@click.option("--structured", type=click.Choice(["off", "json_schema", "json_object"]), default="off",
              show_default=True, help="Send the judge's JSON schema as response_format (constrained decoding, "
              "for small local models): json_schema = OpenAI/vLLM shape, json_object = llama.cpp server shape.")
@click.option("--adapter", type=click.Choice(["json", "chat"]), default="json", show_default=True,
              help="DSPy adapter that formats the prompt and parses the answer.")
@click.option("--max-tokens", type=click.IntRange(min=16), default=512, show_default=True)
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@db_option
def judge_relevance(model: str, api_base: str | None, api_key_env: str | None, judge_name: str,
                    datasets: tuple[str, ...], concurrency: int, limit: int | None, timeout: float, max_retries: int,
                    structured: str, adapter: str, max_tokens: int, no_progress: bool, db: str) -> None:
    """Stage 2: ask an LLM which attributes matter for each imported prompt; store its labels as a judge.

    Results are written as they arrive and cached in the database: rerunning the same command resumes a
    killed run and sends requests only for items that are missing or failed. Compare with humans afterwards:
    personagap report relevance.
    """
    from personagap.judges.runner import LMConfig

    lm = LMConfig(model=model, api_base=api_base, api_key_env=api_key_env, timeout=timeout,
                  adapter=adapter, structured=structured, max_tokens=max_tokens)  # type: ignore[arg-type]
    summary = run_or_exit(lambda: api.judge_relevance(db, judge_name, lm, datasets=datasets, concurrency=concurrency,
                                                      limit=limit, max_retries=max_retries, progress=not no_progress))
    click.echo(summary.render())
