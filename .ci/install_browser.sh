#!/bin/sh
# Install what the dashboard's browser tests (pytest -m browser) and benchmark need, on a fresh Debian
# machine as root: Debian's chromium (driven headless at /usr/bin/chromium) and the Playwright Python
# driver. Never runs `playwright install`: no browser is downloaded, Playwright drives Debian's chromium.
# Usage: .ci/install_browser.sh [PYTHON]   (PYTHON defaults to the venv's python, else python3)
set -eu
PY="${1:-${VENV_PYTHON:-python3}}"
if ! command -v chromium >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation
fi
"$PY" -m pip install --quiet "playwright>=1.40"
chromium --version
"$PY" -c "import playwright.sync_api; print('playwright python driver ok')"
