"""What a judge run did (:class:`RunSummary`): counts, tokens, cost, failures by reason, and how it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class RunSummary:
    """What a run did. ``judged + failed`` counts labels; ``requests`` counts HTTP attempts."""

    run_id: str
    rater: str
    tasks: int
    cached: int = 0
    """Tasks answered from the cache: no request sent for them."""
    judged: int = 0
    failed: int = 0
    requests: int = 0
    retries: int = 0
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    seconds: float = 0.0
    recovered: dict[str, int] = field(default_factory=dict)
    """Killed runs whose journaled answers this run stored first (run id -> answers)."""
    interrupted_runs: list[str] = field(default_factory=list)
    """Runs left 'running' by a process that has died, marked 'interrupted' by this run."""
    lock_wait_seconds: float = 0.0
    """Time the database was held by another process while answers waited (kept in the journal) to be written."""
    notes: list[str] = field(default_factory=list)
    """What the user was told during the run (e.g. the database was locked)."""
    status: Literal["finished", "failed"] = "finished"
    """What the ``runs`` row says: 'failed' when the run labelled nothing (:meth:`all_failed`)."""

    def all_failed(self) -> bool:
        """Whether the run had something to label and every label is a failure (no answer could be used).

        The one threshold of a failed run: any usable label (fresh or from the cache) makes it 'finished', with
        its failures counted by reason; a share below 100% is a partial failure, never a failed run.
        """
        return self.tasks > 0 and self.judged == 0 and self.failed > 0

    def failure_line(self) -> str:
        """One line saying that the run labelled nothing, and the commonest reasons."""
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.failures_by_reason.items(), key=lambda kv: -kv[1]))
        return (f"run {self.run_id} ({self.rater}) failed: every one of its {self.failed} labels failed "
                f"({reasons}); nothing usable was stored. Check --model/--api-base, or the answers' raw text in "
                "the labels table")

    def render(self) -> str:
        """One paragraph for the terminal."""
        lines = [f"run {self.run_id}: {self.rater}" + (" -- FAILED: no usable label" if self.status == "failed"
                                                       else ""),
                 f"  tasks {self.tasks}: {self.cached} answered from the cache (no request), "
                 f"{self.tasks - self.cached} sent to the model",
                 f"  labels judged {self.judged}, failed {self.failed}",
                 f"  HTTP requests {self.requests} (retries {self.retries}), {self.seconds:.1f}s",
                 f"  tokens: prompt {self.prompt_tokens}, completion {self.completion_tokens}"
                 + (f", cost ${self.cost:.4f}" if self.cost is not None else ", cost not reported")]
        if self.failures_by_reason:
            lines.append("  failures: " + ", ".join(f"{k} {v}" for k, v in sorted(self.failures_by_reason.items())))
        if self.recovered:
            lines.append(f"  stored {sum(self.recovered.values())} answers that killed run(s) "
                         f"{', '.join(sorted(self.recovered))} had kept in their journal")
        if self.interrupted_runs:
            lines.append(f"  marked interrupted (process gone): {', '.join(sorted(self.interrupted_runs))}")
        if self.lock_wait_seconds:
            lines.append(f"  the database was locked by another process for {self.lock_wait_seconds:.1f}s: "
                         "answers were kept in the journal and stored when it freed (none lost)")
        return "\n".join(lines)
