"""PersonaGap dashboard entry script: ``streamlit run app.py`` (or ``personagap dashboard --db FILE``).

The page scripts sit beside this file as ``page_*.py``; a folder named ``pages/``
would revive Streamlit's automatic page list next to ``st.navigation``.
"""

import streamlit as st

from personagap.dashboard import render

# No "Deploy" or developer menu items, also under a plain `streamlit run app.py` (the CLI passes it too).
st.set_option("client.toolbarMode", "viewer")
st.set_page_config(page_title="PersonaGap", layout="wide")
render.sidebar()
navigation = st.navigation({
    "Diagnosis": [
        st.Page("page_overview.py", title="Overview", icon=":material/insights:", default=True),
        st.Page("page_stage1.py", title="Stage 1 — extraction", url_path="stage1"),
        st.Page("page_stage2.py", title="Stage 2 — relevance", url_path="stage2"),
        st.Page("page_stage3.py", title="Stage 3 — response", url_path="stage3"),
    ],
    "Explore": [
        st.Page("page_agreement.py", title="Agreement matrix", url_path="agreement"),
        st.Page("page_disagreements.py", title="Disagreements", url_path="disagreements"),
        st.Page("page_runs.py", title="Runs", url_path="runs"),
    ],
    "Collect": [
        st.Page("page_annotate.py", title="Annotate", icon=":material/edit_note:", url_path="annotate"),
    ],
})
navigation.run()
