"""The analysis package loads its statistics modules on first use only (issue 20, build item 3)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _loaded(code: str, *modules: str) -> dict[str, bool]:
    probe = f"{code}\nimport sys\nprint(' '.join(str(m in sys.modules) for m in {modules!r}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(modules, (flag == "True" for flag in out), strict=True))


def test_importing_the_store_loads_no_statistics_library() -> None:
    # The store imports analysis.comparable; an eager package __init__ would pull agreement's scipy.stats in.
    loaded = _loaded("import personagap.store", "scipy.stats", "krippendorff", "personagap.analysis.agreement")
    assert loaded == dict.fromkeys(loaded, False)


def test_public_names_resolve_to_their_modules() -> None:
    import personagap.analysis as pkg
    from personagap.analysis import agreement, pairwise

    for name in pkg.__all__:
        owner = pairwise if name in {"GroupAgreement", "PairwiseResult", "pairwise_agreement"} else agreement
        assert getattr(pkg, name) is getattr(owner, name)
    assert set(pkg.__all__) <= set(dir(pkg))


def test_an_unknown_name_is_an_attribute_error() -> None:
    import personagap.analysis as pkg

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pkg.nope
