"""Serve the dashboard: ``python -m personagap.dashboard.serve APP_FLAGS...`` (what `personagap dashboard` runs).

Same as ``streamlit run app.py FLAGS``, but the heavy imports and the diagnosis start
before the server opens its port, so the first page view does not wait for them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    """Warm up, then hand over to Streamlit's own CLI with ``argv`` as ``streamlit run`` flags."""
    # The pipeline view and the diagnosis first, before any heavy import: their queries run in DuckDB (off the
    # interpreter lock) while the imports below and Streamlit's start-up use the other core.
    from personagap.dashboard import prefetch

    db = os.environ.get("PERSONAGAP_DB")
    if db and Path(db).exists():
        prefetch.start(db)  # the Overview's pipeline view too

    import altair  # noqa: F401 - imported now so the first script run does not pay for it
    import pandas  # noqa: F401
    from streamlit.web import cli as stcli

    import personagap.dashboard.charts  # noqa: F401
    import personagap.dashboard.queries  # noqa: F401
    import personagap.dashboard.render  # noqa: F401 - every page's module: the first script run imports none
    app = str(Path(__file__).resolve().parent / "app.py")
    sys.argv = ["streamlit", "run", app, *(sys.argv[1:] if argv is None else argv)]
    sys.exit(stcli.main())


if __name__ == "__main__":
    main()
