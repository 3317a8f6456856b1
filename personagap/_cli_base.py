"""The CLI's command groups and shared options; stage modules in :mod:`personagap.commands` add commands."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

import click

# Light imports only: `personagap --help` and every `personagap COMMAND --help` load no DuckDB, pandas, scipy or
# DSPy (tests/core/test_cli_lazy_imports.py); what a command needs is imported where it runs.
from personagap import __version__, store
from personagap.store import StoreError
from personagap.store.defaults import DEFAULT_DB

if TYPE_CHECKING:
    from personagap.judges.lm import ConfidenceMode
    from personagap.judges.runner import LMConfig, RunSummary
    from personagap.records import DatasetRecord

T = TypeVar("T")


class LazyModule:
    """A module imported on first attribute use: a command module names its stage's module without loading it.

    Declare it as ``if TYPE_CHECKING: from X import y as m`` / ``else: m = LazyModule("X.y")`` so that type checks
    see the real module.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        return getattr(importlib.import_module(self._name), attr)

EXIT_RUN_FAILED = 1
"""Exit code of a judge run that ran but produced no label: every call failed (the summary says why)."""
EXIT_USER_ERROR = 2
"""Exit code of an error the user can cause: a bad input file, an unusable or damaged database, a bad option."""

_DB_META = "personagap.db"
"""``click.Context.meta`` key (shared by every nested context) of the command's ``--db`` file, so the one
error map can name the database an error came from."""


def _remember_db(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    ctx.meta[_DB_META] = value
    return value


_db_path_option = click.option("--db", type=click.Path(dir_okay=False), default=DEFAULT_DB, show_default=True,
                               callback=_remember_db, help="DuckDB file to read/write (created on first import).")


def _set_force_schema(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    # Set on every invocation (also to False), so one command's flag never outlives it.
    store.FORCE_SCHEMA = value


_force_schema_option = click.option(
    "--force-schema", is_flag=True, expose_value=False, callback=_set_force_schema,
    help="Add PersonaGap's tables to a DuckDB file that already holds another program's tables "
         "(refused without this flag).")


def db_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--db FILE`` option (and ``--force-schema``) of every command that opens the store."""
    return _db_path_option(_force_schema_option(fn))


def expected_errors() -> tuple[type[Exception], ...]:
    """The errors a user can cause (bad input files, an unusable database): one line each, never a traceback.

    Anything else is a bug and keeps its traceback. (A function: the data error's module imports the store's
    writers, which the CLI loads only when a command runs.)
    """
    from personagap.human_data._jsonl import DataError

    return DataError, StoreError


def sql_bugs() -> tuple[type[Exception], ...]:
    """DuckDB errors about our own SQL text: bugs, which keep their traceback.

    (A store with missing tables is refused with a :class:`StoreError` when it is opened, so a catalog error
    later on is ours.)
    """
    import duckdb

    return duckdb.ParserException, duckdb.SyntaxException, duckdb.BinderException, duckdb.CatalogException


def one_line(text: str) -> str:
    """:func:`personagap.human_data._jsonl.one_line`, imported when a message is printed."""
    from personagap.human_data._jsonl import one_line as line

    return line(text)


def exit_for(exc: BaseException, db: str | None = None) -> tuple[int, str] | None:
    """The one map from errors to exit codes: (code, the one line to print), or None for a bug.

    Args:
        exc: What a command raised.
        db: The command's ``--db`` file, named in a database error that does not name it itself.

    Returns:
        :data:`EXIT_USER_ERROR` for :func:`expected_errors` and for any DuckDB error met while a command reads
        or writes the store (a corrupt page found mid-query, a full disk), except errors in our own SQL text
        (:func:`sql_bugs`); None for anything else, which keeps its traceback.
    """
    import duckdb

    if isinstance(exc, expected_errors()):
        return EXIT_USER_ERROR, one_line(str(exc))
    if isinstance(exc, duckdb.Error) and not isinstance(exc, sql_bugs()):
        said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = f"{db}: " if db else ""
        return EXIT_USER_ERROR, one_line(f"{where}the database failed while it was read or written: {said}")
    return None


def _current_db() -> str | None:
    ctx = click.get_current_context(silent=True)
    found = ctx.meta.get(_DB_META) if ctx is not None else None
    return None if found is None else str(found)


def _exit_on(exc: BaseException, db: str | None) -> None:
    """Print ``exc``'s one line and exit with its code when :func:`exit_for` maps it; return for a bug."""
    mapped = exit_for(exc, db)
    if mapped is None:
        return
    code, line = mapped
    click.echo(line, err=True)
    sys.exit(code)


class _MappedGroup(click.Group):
    """The root group: every command's errors go through :func:`exit_for`, whichever line raised them."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a mapped error becomes one line and its exit code, a bug keeps its traceback."""
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise  # click's own (`--help` ends in Exit): never mapped, and mapping would import the store's errors
        except Exception as exc:
            _exit_on(exc, ctx.meta.get(_DB_META))
            raise


@click.group(cls=_MappedGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="personagap")
def cli() -> None:
    """PersonaGap: which stage of your LLM personalization pipeline fails, and do judges agree with humans?

    \b
    Typical session:
      personagap demo                                        # everything offline on built-in sample data
      personagap import recenter ../shared/data/recenter     # human + LLM labels into personagap.duckdb
      personagap report relevance                            # stage 2: judges vs humans, with 95% CIs
      personagap judge relevance --model openai/gpt-4o-mini  # add your own LLM as a judge
    """


@cli.group(name="import")
def import_group() -> None:
    """Import a public human-label release into the DuckDB store (one transaction per import)."""


@cli.group(name="report")
def report_group() -> None:
    """Print a stage's comparison of judges with humans (with 95% CIs)."""


@cli.group(name="judge")
def judge_group() -> None:
    """Run an LLM (any OpenAI-compatible or LiteLLM provider) as a judge on imported items."""


@dataclass(frozen=True)
class DemoStep:
    """One stage's part of `personagap demo`: writes sample data, imports it into ``db``, returns a report."""

    title: str
    run: Callable[[Path, Path], str]
    """(work folder, database) -> text to print. Must be offline and need no API key."""


DEMO_STEPS: list[DemoStep] = []


def demo_step(title: str) -> Callable[[Callable[[Path, Path], str]], Callable[[Path, Path], str]]:
    """Register a function as a `personagap demo` step (steps run in registration order)."""
    def add(fn: Callable[[Path, Path], str]) -> Callable[[Path, Path], str]:
        DEMO_STEPS.append(DemoStep(title, fn))
        return fn
    return add


def run_or_exit(action: Callable[[], T]) -> T:
    """Run ``action``; print a mapped error (:func:`exit_for`) as one line and exit with its code.

    The line reads ``FILE[:LINE]: field 'NAME': what is wrong`` (or what to do), as the
    importers and the store phrase it; control characters are escaped so it stays one line.
    The root group applies the same map to every command; this is for code run outside it (``demo`` steps).
    """
    try:
        return action()
    except Exception as exc:
        _exit_on(exc, _current_db())
        raise


def fail(line: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """Stop a command with one line on stderr (control characters escaped) and ``code``."""
    click.echo(one_line(line), err=True)
    sys.exit(code)


def echo_run(summary: RunSummary) -> None:
    """Print a judge run's summary; a run whose every call failed then exits :data:`EXIT_RUN_FAILED`.

    Partial failures keep exit 0 (the summary counts them by reason); a run that labelled nothing says so in
    one line on stderr, so a script never takes an empty run for a finished one.
    """
    click.echo(summary.render())
    if summary.status == "failed":
        fail(f"error: {summary.failure_line()}", EXIT_RUN_FAILED)


_CONFIDENCE_CHOICES = ("none", "verbal", "logprobs")
"""``--confidence`` choices: :data:`personagap.judges.lm.CONFIDENCE_MODES`, spelled here so that ``--help`` does not
import the judges (DSPy); tests/core/test_confidence_cli_options.py checks the two are equal."""


@dataclass(frozen=True)
class RunSettings:
    """How a judge run executes (shared by every `personagap judge ...` command)."""

    concurrency: int
    max_retries: int
    progress: bool
    repeats: int = 1
    """Samples per item (``--repeats``); above 1 the command stores each sample, their majority and self-agreement."""


_LLM_OPTIONS = (
    click.option("--model", default=None, help="LiteLLM/DSPy model string, e.g. openai/gpt-4o-mini, or "
                 "openai/<served-name> with --api-base for a local OpenAI-compatible server "
                 "(vLLM, Ollama, llama.cpp)."),
    click.option("--api-base", default=None, help="Base URL of an OpenAI-compatible server, "
                 "e.g. http://127.0.0.1:8000/v1."),
    click.option("--api-key-env", default=None, help="Environment variable holding the API key "
                 "[default: the provider's, e.g. OPENAI_API_KEY]. The key is never stored or printed."),
    click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Calls in flight."),
    click.option("--timeout", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
                 help="Seconds per call before it counts as a timeout."),
    click.option("--max-retries", type=click.IntRange(min=0), default=4, show_default=True,
                 help="Retries on HTTP 429/5xx and timeouts (exponential backoff with jitter; Retry-After honoured)."),
    click.option("--structured", type=click.Choice(["off", "json_schema", "json_object"]), default="off",
                 show_default=True, help="Send the judge's JSON schema as response_format (constrained decoding, "
                 "for small local models): json_schema = OpenAI/vLLM shape, json_object = llama.cpp server shape."),
    click.option("--adapter", type=click.Choice(["json", "chat"]), default="json", show_default=True,
                 help="DSPy adapter that formats the prompt and parses the answer."),
    click.option("--max-tokens", type=click.IntRange(min=16), default=None,
                 help="Answer length cap [default: the judge's need; 512, 1024 for extraction]."),
    click.option("--no-progress", is_flag=True, help="Hide the progress bar."),
    click.option("--confidence", type=click.Choice(_CONFIDENCE_CHOICES), default="none", show_default=True,
                 help="Store the judge's confidence with each label: verbal = the prompt asks for a 0-100 "
                 "confidence field (a rater of its own, NAME+verbal-confidence); logprobs = the probability of the "
                 "answer tokens, from the server's log-probabilities (same prompt); none = no confidence. Reports "
                 "then show calibration and agreement at each confidence; `personagap route` uses it."),
    click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
                 help="Sampling temperature (0: reproducible answers). Above 0 with --repeats, to see how stable "
                 "the judge is."),
    click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Samples per item (needs --temperature above 0 when above 1): stores each sample as a rater "
                 "(NAME+sample-k), their majority as a judge of its own (NAME+majority-of-K) and prints the judge's "
                 "agreement with itself, a ceiling on its agreement with people."),
)


def llm_judge_options(default_max_tokens: int = 512) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the LLM options every judge command shares; the command receives ``lm`` and ``run`` instead.

    ``lm`` is None when no ``--model`` was given (judges that need no LLM, e.g. trained ones); a command
    whose judge needs an LLM calls :func:`require_lm`.

    Args:
        default_max_tokens: ``--max-tokens`` when not given (extraction answers are longer).
    """
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, model: str | None, api_base: str | None, api_key_env: str | None, concurrency: int,
                    timeout: float, max_retries: int, structured: Literal["off", "json_schema", "json_object"],
                    adapter: Literal["json", "chat"], max_tokens: int | None, no_progress: bool,
                    confidence: ConfidenceMode, temperature: float, repeats: int, **kwargs: Any) -> Any:
            from personagap.judges.runner import LMConfig

            if repeats > 1 and temperature == 0:
                raise click.UsageError(f"--repeats {repeats} at --temperature 0 asks one deterministic question "
                                       f"{repeats} times; give --temperature above 0 (e.g. 0.7)")
            lm = None if model is None else LMConfig(
                model=model, api_base=api_base, api_key_env=api_key_env, timeout=timeout,
                structured=structured, adapter=adapter, temperature=temperature, confidence=confidence,
                max_tokens=max_tokens or default_max_tokens)
            return fn(*args, lm=lm, run=RunSettings(concurrency, max_retries, not no_progress, repeats), **kwargs)

        for option in reversed(_LLM_OPTIONS):
            wrapper = option(wrapper)
        return wrapper

    return decorate


def echo_judge_run(db: str, judge_name: str, lm: LMConfig, run: RunSettings,
                   run_once: Callable[[], RunSummary]) -> None:
    """Run a stage's judge once, or ``run.repeats`` times as samples; print what was stored.

    With ``--repeats K`` above 1, each sample is its own rater, their majority is stored as a judge
    (:func:`personagap.judges.repeats.repeat_runs`) and the judge's self-agreement is printed. A sample whose every
    call failed stops the command as a failed single run does (:func:`echo_run`).

    Args:
        db: The store.
        judge_name: The registered judge ``run_once`` runs.
        lm: Its model settings.
        run: The run settings (``repeats``).
        run_once: One run of the stage's judge (e.g. ``lambda: api.judge_relevance(...)``).
    """
    if run.repeats == 1:
        echo_run(run_once())
        return
    from personagap.judges.base import get_judge
    from personagap.judges.repeats import repeat_runs

    def sample() -> RunSummary:
        summary = run_once()
        if summary.status == "failed":
            echo_run(summary)  # prints it and exits EXIT_RUN_FAILED
        return summary

    click.echo(repeat_runs(db, get_judge(judge_name), lm, run.repeats, sample).render())


def refuse_repeats(run: RunSettings, what: str) -> None:
    """Stop with a usage error when ``--repeats`` above 1 was given to a judge that cannot repeat (``what``)."""
    if run.repeats > 1:
        raise click.UsageError(f"--repeats is for LLM judges' labels; {what} cannot repeat")


def weight_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--weight items|users`` of a report: what its judge figures weigh equally (issue 30; docs/methods.md)."""
    return click.option("--weight", type=click.Choice(["items", "users"]), default="items", show_default=True,
                        help="items: figures pool every item (heavy users count most); users: each user's counts "
                        "become proportions first, so each user counts once. A report's JSON judge rows carry both "
                        "weightings' kappa and accuracy (by_weight) and their difference (weight_gap) either way.")(fn)


def target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--target-accuracy`` / ``--target-kappa`` of a report: the target a judge's confidence threshold must reach."""
    fn = click.option("--target-kappa", type=click.FloatRange(min=-1, max=1), default=None,
                      help="...or this kappa (give at most one target).")(fn)
    return click.option("--target-accuracy", type=click.FloatRange(min=0, max=1), default=None,
                        help="For judges that state a confidence: the lowest confidence whose labels reach this "
                        "accuracy on half of the users, checked on the other half [default: kappa at the "
                        "dataset's blind human ceiling, where two people labelled the same items; else no "
                        "threshold].")(fn)


def with_confidence(db: str, stage: str, report: Any, as_json: bool, render: Callable[[Any], str],
                    target_accuracy: float | None, target_kappa: float | None) -> str:
    """A stage report's output (JSON or text) with its judges' confidence figures (:mod:`stages.confidence_rows`).

    Args:
        db: The store.
        stage: Pipeline stage.
        report: The stage's report (has ``to_json_dict``).
        as_json: JSON (judge rows gain ``calibration``, ``coverage_curve``, ``threshold``) or text (a section).
        render: The stage's text renderer.
        target_accuracy: The threshold's target accuracy (or None).
        target_kappa: The threshold's target kappa (or None).
    """
    import json

    from personagap.stages.confidence_rows import confidence_section, merge_confidence, stage_confidence

    if target_accuracy is not None and target_kappa is not None:
        raise click.UsageError("give --target-accuracy or --target-kappa, not both")
    entries = stage_confidence(db, stage, target_accuracy=target_accuracy, target_kappa=target_kappa)
    if as_json:
        return json.dumps(merge_confidence(report.to_json_dict(), stage, entries), indent=2)
    return render(report) + confidence_section(entries)


def require_lm(lm: LMConfig | None, judge: str) -> LMConfig:
    """Return ``lm``, or stop with a usage error naming the missing ``--model``."""
    if lm is None:
        raise click.UsageError(f"judge {judge!r} calls an LLM: give --model (e.g. openai/gpt-4o-mini)")
    return lm


def _stage_records(db: str, stage: str, datasets: tuple[str, ...]) -> list[DatasetRecord]:
    """The stored records of ``stage``'s datasets (only ``datasets`` when given); none is one line, exit 2."""
    from personagap.datasets import dataset_records

    with store.opened(db, read_only=True) as con:
        records = dataset_records(con)
    found = [r for (s, name), r in records.items() if s == stage and (not datasets or name in datasets)]
    if not found:
        which = f"no {stage} dataset named {', '.join(datasets)}" if datasets else f"no {stage} dataset"
        raise StoreError(f"{db}: {which}; import one first (see `personagap import --help`)")
    return found


def fitting_judges(db: str, stage: str, datasets: tuple[str, ...]) -> str:
    """One sentence naming, per stored dataset of ``stage``, the judges that fit it (``judges.base.fits``)."""
    from personagap.judges.base import describe_fit

    return "Judges that fit the data: " + "; ".join(describe_fit(r) for r in _stage_records(db, stage, datasets))


def require_fitting_data(db: str, stage: str, judge_name: str, datasets: tuple[str, ...]) -> None:
    """Stop with one line (exit 2) unless some dataset of ``stage`` (of ``datasets``) fits ``judge_name``."""
    from personagap.judges.base import JUDGES, describe_fit, fits

    records = _stage_records(db, stage, datasets)
    if not any(fits(JUDGES[judge_name], r) for r in records):
        fail(f"{db}: no dataset here fits judge {judge_name!r} (it answers {JUDGES[judge_name].item_kind} items with "
             f"{'/'.join(JUDGES[judge_name].categories)}). " + "; ".join(describe_fit(r) for r in records))
