"""Stage 1's report scores verifiers over each dataset's scale as its record holds it (the one reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from personagap import datasets
from personagap.records import DatasetScale
from personagap.stages import extraction
from personagap.store import load_labels, opened
from tests.support.oracles import extraction_report


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from personagap.commands.extraction import demo_extraction

    folder = tmp_path_factory.mktemp("demo")
    demo_extraction(folder, folder / "demo.duckdb")
    return folder / "demo.duckdb"


def _pabak(report: extraction.ExtractionReport) -> dict[tuple[str, str], float]:
    return {(v.dataset, v.verifier): v.pabak for v in report.verifiers}


def test_report_takes_each_dataset_scale_from_dataset_records(demo_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(demo_db, read_only=True) as con:
        items, labels = extraction.load_items(con), load_labels(con, stage="extraction")
        records = datasets.dataset_records(con)
    ours = {ds: r.scale for (stage, ds), r in records.items() if stage == "extraction"}
    assert ours, "the demo store holds stage-1 datasets"
    # A scale with one category more than the data uses: PABAK depends on K, so the report shows which scale it used.
    wider = {ds: DatasetScale(kind="nominal", categories=(*s.categories, "zz-unused")) for ds, s in ours.items()}

    def records_with_wider_scales(con: Any) -> dict[tuple[str, str], Any]:
        return {k: (r.model_copy(update={"scale": wider[k[1]]}) if k[0] == "extraction" else r)
                for k, r in datasets.dataset_records(con).items()}

    monkeypatch.setattr(extraction, "dataset_records", records_with_wider_scales)
    read = _pabak(extraction.report_extraction(demo_db))
    pure_wider = _pabak(extraction_report(items, labels, scales=wider))
    pure_own = _pabak(extraction_report(items, labels, scales=ours))
    assert read and read == pure_wider
    assert read != pure_own  # the scale handed in is the one scored over


@pytest.mark.slow
def test_pure_report_without_records_infers_the_readers_scale(demo_db: Path) -> None:
    with opened(demo_db, read_only=True) as con:
        items, labels = extraction.load_items(con), load_labels(con, stage="extraction")
        ours = {ds: r.scale for (stage, ds), r in datasets.dataset_records(con).items() if stage == "extraction"}
    assert (_pabak(extraction_report(items, labels))
            == _pabak(extraction_report(items, labels, scales=ours)))
