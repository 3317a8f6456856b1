"""What training and a trained judge's run return: figures per judge, the run summary, and the terminal text."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from personagap.analysis.agreement import ci_text
from personagap.analysis.ci_rule import ci_cell
from personagap.judges.trained import VERIFIER_NOTE, CrossValidation, TrainedJudgeSpec, TrainedModel
from personagap.text import number


@dataclass(frozen=True)
class ScoreRow:
    """One judge's figures on the evaluated items (the trained judge's out-of-fold ones, or an LLM's)."""

    judge: str
    rater_kind: str
    n: int
    figures: dict[str, float]
    cis: dict[str, list[float]]


@dataclass
class TrainResult:
    """What `personagap train` did: the saved model, its CV figures and the LLMs' on the same items."""

    kind: str
    model_path: str
    metadata: dict[str, Any]
    rows: list[ScoreRow]
    stored_cv_labels: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    cv: CrossValidation | None = None
    """What the cross-validation did, fold by fold (its groups and what each fold's model was fitted on)."""

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        m = self.metadata
        cv = m["cv"]
        if self.kind == "verifier":
            return self._render_verifier()
        lines = [f"Trained {m['judge']} v{m['version']} -> {self.model_path} (+ .json metadata), "
                 f"model id {m['model_id']}",
                 f"  trained on {m['n_train']} labelled items of {m['n_groups']} {cv['grouped_by']}s "
                 f"({', '.join(m['datasets'])}); data fingerprint {m['data_fingerprint'][:16]}",
                 f"  threshold {m['threshold']:.4f}" + (f" (human base rate {m['base_rate']:.3f} on the training data)"
                                                        if "base_rate" in m else ""),
                 f"  {cv['n_splits']}-fold cross-validation grouped by {cv['grouped_by']} (seed {cv['seed']}); "
                 f"{self.stored_cv_labels} out-of-fold labels stored as {cv['rater']!r}; {self.seconds:.1f}s", ""]
        if self.kind == "relevance":
            cols = (("kappa", "kappa", 3), ("over_selection", "over-sel", 2), ("precision", "prec", 2),
                    ("recall", "recall", 2), ("f1", "F1", 2), ("judge_yes_rate", "judge yes", 2),
                    ("trained_same_items", "trained*", 3))
        else:
            cols = (("accuracy", "acc", 3), ("accuracy_decisive", "acc A/B", 3), ("kappa", "kappa", 2),
                    ("first_position", "1st pos", 2), ("longer", "longer", 2), ("tie_rate", "ties", 2),
                    ("trained_same_items", "trained*", 3))
        head = f"{'judge (same items)':<46}{'n':>6}" + "".join(f"{c[1]:>10}" for c in cols) + f"  {cols[0][1]} 95% CI"
        lines += [head, "-" * len(head)]
        for r in self.rows:
            vals = "".join(f"{number(r.figures.get(c[0]), c[2]):>10}" for c in cols)
            ci = r.cis.get(cols[0][0])
            lines.append(f"{r.judge[:45]:<46}{r.n:>6}{vals}  {ci_cell(ci)}")
        lines.append(f"  trained* = the trained judge's out-of-fold {cols[0][1]} on exactly that judge's items")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


    def _render_verifier(self) -> str:
        m = self.metadata
        cv = m["cv"]
        lines = [f"Trained {m['judge']} v{m['version']} -> {self.model_path} (+ .json metadata), "
                 f"model id {m['model_id']}",
                 f"  {VERIFIER_NOTE}",
                 f"  trained on {m['n_train']} pairs ({m['n_positive']} gold preferences) of {m['n_groups']} users "
                 f"({', '.join(m['datasets'])}, split {m['train_split']}); data fingerprint "
                 f"{m['data_fingerprint'][:16]}",
                 f"  threshold {m['threshold']:.2f}: {m['threshold_rule']}",
                 f"  {cv['n_splits']}-fold cross-validation grouped by {cv['grouped_by']} (seed {cv['seed']}); "
                 f"out-of-fold predictions not stored (the negatives are synthetic pairs, not items); "
                 f"{self.seconds:.1f}s", ""]
        head = f"{'evaluation':<46}{'n':>6}{'users':>7}{'AUC':>8}{'acc':>8}{'kappa':>8}{'ok rate':>9}  95% CIs (users)"
        lines += [head, "-" * len(head)]
        for r in self.rows:
            f = r.figures
            lines.append(f"{r.judge[:45]:<46}{r.n:>6}{int(f['users']):>7}{number(f['auc'], 3):>8}"
                         f"{number(f['accuracy'], 3):>8}{number(f['kappa'], 3):>8}{number(f['judge_ok_rate'], 2):>9}  "
                         f"AUC {_verifier_ci(r, 'auc')} acc {_verifier_ci(r, 'accuracy')} "
                         f"kappa {_verifier_ci(r, 'kappa')}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _verifier_ci(row: ScoreRow, name: str) -> str:
    # The one CI text (agreement.ci_text): says "too few users for a CI" rather than printing an empty interval.
    return ci_text(ci=row.cis.get(name), n_users=int(row.figures["users"]))


@dataclass
class TrainedRunSummary:
    """What a trained judge's run wrote."""

    run_id: str
    rater: str
    labelled: int
    by_label: dict[str, int]
    seconds: float
    in_training: int = 0
    """Items the model was trained on or of its training users: condition 'in-sample', left out of every comparison."""

    def render(self) -> str:
        """One paragraph for the terminal."""
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.by_label.items()))
        return (f"run {self.run_id}: {self.rater}\n  labelled {self.labelled} items ({counts}), no LLM calls, "
                f"{self.seconds:.1f}s"
                + (f"\n  note: {self.in_training} of these items were in the model's training data or belong to its "
                   "training users: stored under condition 'in-sample' and left out of reports (the '/cv' rater "
                   "holds honest out-of-fold labels)"
                   if self.in_training else ""))


def trained_model_id(spec: TrainedJudgeSpec, data_fp: str, params: dict[str, Any]) -> str:
    """A saved model's id: a hash of the judge, its version, the training data's fingerprint and the parameters."""
    blob = f"{spec.name}|{spec.version}|{data_fp}|{sorted(params.items())}"
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def with_core(model: TrainedModel) -> dict[str, Any]:
    """A model's metadata with its judge and version, as a :class:`TrainResult` reports it."""
    return {"judge": model.judge, "version": model.version, **model.metadata}
