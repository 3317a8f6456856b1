"""Serve the dashboard: ``python -m personagap.dashboard.serve APP_FLAGS...`` (what `personagap dashboard` runs).

Same as ``streamlit run app.py FLAGS``, but the Overview's figures start computing (in a child process,
:mod:`personagap.dashboard.prefetch`) before anything heavy is imported, and what the first script run would
otherwise pay for is done before the server opens its port (:func:`warm_up`), so the first page view does not wait
for either.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def warm_up(db: str | None) -> None:
    """Pay the first script run's one-off costs now: imports, Streamlit's REPL check, Altair's schema, row counts.

    Each was measured on the first Overview of a fresh server at 10^6 labels (load average ~4 on 2 cores):
    Streamlit's check whether it runs in a REPL 0.2-0.5 s, the Annotate spool module and the chart and table
    converters' imports 0.1 s, the first Altair chart's schema 0.2 s, the store's row counts 0.2-0.5 s.
    """
    import altair  # noqa: F401 - imported now so the first script run does not pay for it
    import narwhals.stable.v1  # noqa: F401 - Altair's reading of a DataFrame (the forest chart)
    import pandas as pd
    import pyarrow.pandas_compat  # noqa: F401 - st.dataframe's conversion
    import streamlit.delta_generator
    import streamlit.material_icon_names  # noqa: F401 - the pages' icons
    from streamlit.runtime.caching import cache_data_api, cache_resource_api

    # Each cached function of the pages' modules, decorated here before Streamlit's runtime exists, logged "No
    # runtime found, using MemoryCacheStorageManager" (19 lines at every start); the caches work the same once the
    # runtime serves the pages, so those lines said nothing a user could act on.
    quiet = [logging.getLogger(m.__name__) for m in (cache_data_api, cache_resource_api)]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        import personagap.dashboard.annotate  # noqa: F401 - the sidebar flushes its spool on every page
        import personagap.dashboard.render  # noqa: F401 - every page's module: the first script run imports none
        from personagap.dashboard import charts, prefetch, queries
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)

    # The first element a script sends checks whether Streamlit runs in a REPL, by inspect.stack(): the source of
    # every frame is read and every loaded module's path resolved. Under `streamlit run` it never does.
    if hasattr(streamlit.delta_generator, "_use_warning_has_been_displayed"):
        streamlit.delta_generator._use_warning_has_been_displayed = True
    judges = pd.DataFrame({"stage": ["relevance"], "dataset": ["d"], "judge": ["j"], "kind": ["llm"], "n": [1],
                           "kappa": [0.5], "ci_low": [0.4], "ci_high": [0.6]})
    ceilings = pd.DataFrame({"stage": ["relevance"], "dataset": ["d"], "ceiling": [0.7], "ceiling_low": [0.6],
                             "ceiling_high": [0.8], "raters": [2]})
    charts.forest_chart(judges, ceilings).to_dict()  # loads and compiles the Vega-Lite schema once
    if db:
        # The first page's row counts (and DuckDB's first open in this process): the first script run adopts them.
        read = prefetch.stamp(db)
        try:
            prefetch.keep_state(db, queries.db_state(db), read)
        except Exception:  # noqa: BLE001 - the page reads the file again and reports what is wrong itself
            pass


def main(argv: list[str] | None = None) -> None:
    """Warm up, then hand over to Streamlit's own CLI with ``argv`` as ``streamlit run`` flags."""
    # The pipeline view and the diagnosis first, before any heavy import: a child process computes them while the
    # imports below and Streamlit's start-up use the other core.
    from personagap.dashboard import prefetch

    db = os.environ.get("PERSONAGAP_DB")
    if db and Path(db).exists():
        prefetch.start(db)  # the Overview's pipeline view too
    else:
        db = None

    from streamlit.web import cli as stcli

    warm_up(db)
    app = str(Path(__file__).resolve().parent / "app.py")
    sys.argv = ["streamlit", "run", app, *(sys.argv[1:] if argv is None else argv)]
    sys.exit(stcli.main())


if __name__ == "__main__":
    main()
