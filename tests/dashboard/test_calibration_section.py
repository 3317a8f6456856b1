"""The stage page's Calibration section (issue 23) under Streamlit's AppTest, on the shared PRISM release."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from personagap.dashboard import confidence
from personagap.dashboard.display import md
from tests.support.paths import REPO
from tests.support.stores import copy_store

APP = REPO / "dashboard" / "app.py"


@pytest.fixture(scope="module")
def prism_db(prism_release_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_store(prism_release_db, tmp_path_factory.mktemp("conf_dash"))


def _stage3(db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=240).run()
    at.switch_page("page_stage3.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _markdown(at: AppTest) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "subheader", "caption") for e in getattr(at, kind))


@pytest.mark.slow
def test_calibration_section_shows_every_judge_with_a_certainty(prism_db: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    at = _stage3(prism_db, monkeypatch)
    text = _markdown(at)
    assert "Calibration: where may the judge decide?" in text
    for judge in ("command-r-plus [all-features]", "command-r-plus [key-features]", "command-r-plus [no-profile]",
                  "gpt-4o [key-features]"):
        assert md(judge) in text
    assert md("gpt-3.5-turbo [all-features+with-tie]") not in text.split("Calibration:")[1].split("Left:")[0]
    # PRISM has one human per item: no ceiling, so no threshold until a target is given.
    assert text.count("no target given: no threshold chosen") == 4
    target = next(n for n in at.number_input if n.key == "conf-target-response")
    target.set_value(0.75).run()
    after = _markdown(at)
    assert "reaches accuracy ≥ 0.75 (given)" in after and "held-out users" in after


def test_chart_frames_keep_missing_intervals_missing() -> None:
    bins = [{"lo": 0.0, "hi": 10.0, "n": 2, "confidence": 0.05, "agreement": 1.0, "agreement_ci": [None, None],
             "n_users": 2},
            {"lo": 10.0, "hi": 20.0, "n": 9, "confidence": 0.15, "agreement": 0.5, "agreement_ci": [0.2, 0.8],
             "n_users": 7}]
    frame = confidence.reliability_frame(bins)
    assert frame["ci_low"].isna().tolist() == [True, False]
    assert frame.loc[1, "ci_high"] == 0.8
    chart = confidence.coverage_chart(pd.DataFrame({"coverage": [0.5, 1.0], "kappa": [0.6, 0.4]}).assign(
        min_confidence=[80, 20], n=[5, 10], n_users=[5, 8], accuracy=[0.8, 0.7], ci_low=None, ci_high=None),
        ceiling=0.5, chosen_coverage=0.5)
    assert len(chart.layer) == 3  # the curve, the ceiling rule, the chosen threshold's rule
