"""The dashboard's pages as functions over cached, read-only queries (what the ``page_*.py`` scripts call).

Caching holds query *results*, never a connection: every cache miss opens the file
read-only for one batch and closes it, so a judge run writing in short transactions
gets the file between two reads. The Refresh button clears the caches; so does every
label the Annotate page writes (:mod:`personagap.dashboard.annotate_page`).

Imported text (attributes, prompts, rater names, reasons, a PRISM ``certainty``) is
never rendered as Markdown: it goes through :func:`md` (escaped) or into code/text
elements, so a value like ``![](http://host/p.png)`` is shown, not fetched.

The pages live in pieces: :mod:`.overview`, :mod:`.stage_sections` (a stage's page), :mod:`.explore` (agreement
matrix, disagreements, runs); what they share in :mod:`.shell` (sidebar, empty-store guidance), :mod:`.data`
(cached queries), :mod:`.tables` (display tables) and :mod:`.display` (escaping and number text). This module
names them for the page scripts.
"""

from __future__ import annotations

from personagap.analysis.diagnosis import STAGES
from personagap.dashboard.data import TTL_SECONDS, case, db_path, diag
from personagap.dashboard.display import md, missing
from personagap.dashboard.explore import disagreements, runs_page, show_item, show_labels
from personagap.dashboard.overview import overview
from personagap.dashboard.shell import require_data, sidebar
from personagap.dashboard.stage_sections import stage_page
from personagap.dashboard.tables import estimates_table, forest_frames, forest_title, judges_table

# The Annotate page (annotate_page.py) still calls these by their former private names.
_diag = diag
_case = case

__all__ = ["STAGES", "TTL_SECONDS", "db_path", "disagreements", "estimates_table", "forest_frames",
           "forest_title", "judges_table", "md", "missing", "overview", "require_data", "runs_page", "show_item",
           "show_labels", "sidebar", "stage_page"]
