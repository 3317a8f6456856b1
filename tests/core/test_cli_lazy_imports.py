"""`personagap --help` and every `personagap COMMAND --help` load no DuckDB, pandas, scipy or DSPy (issue 20).

Each of those costs a fraction of a second to import; a command that only prints its help pays none of it, and a
command pays only for what it uses. Run in a fresh interpreter, as a user's shell runs the command.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "scipy", "duckdb", "dspy", "litellm")

_PROBE = """
import json, sys
import click
from personagap.cli import cli

def paths(group, prefix):
    for name, cmd in sorted(group.commands.items()):
        yield [*prefix, name]
        if isinstance(cmd, click.Group):
            yield from paths(cmd, [*prefix, name])

heavy = %r
loaded = {}
for path in [[]] + list(paths(cli, [])):
    try:
        cli.main(args=[*path, "--help"], prog_name="personagap", standalone_mode=True)
    except SystemExit as exc:
        assert exc.code in (0, None), (path, exc.code)
    now = [m for m in heavy if m in sys.modules]
    if now:
        loaded[" ".join(path) or "(top)"] = now
        break
print(json.dumps({"loaded": loaded, "n": len(list(paths(cli, [])))}))
"""


def test_no_help_loads_a_heavy_library() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE % (HEAVY,)], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["n"] > 20  # every command and subcommand was asked for its help
    assert result["loaded"] == {}, f"--help loaded {result['loaded']}"


def test_the_probe_sees_a_loaded_library() -> None:
    # The check itself can fail: a command path that imports pandas is reported.
    code = _PROBE.replace("from personagap.cli import cli", "from personagap.cli import cli\nimport pandas")
    done = subprocess.run([sys.executable, "-c", code % (HEAVY,)], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1])["loaded"] == {"(top)": ["pandas"]}


def test_the_light_constants_match_their_modules() -> None:
    # The CLI reads these from light modules, which the store, the records and the label importer re-export.
    from typing import get_args

    from personagap.commands.labels import STAGES
    from personagap.human_data.label_format import STAGES as FORMAT_STAGES
    from personagap.records import Stage
    from personagap.store.defaults import DEFAULT_DB
    from personagap.store.schema import DEFAULT_DB as SCHEMA_DEFAULT_DB

    assert DEFAULT_DB == SCHEMA_DEFAULT_DB == "personagap.duckdb"
    assert STAGES == FORMAT_STAGES == get_args(Stage) == ("extraction", "relevance", "response")


def test_a_command_still_maps_its_errors(tmp_path: object) -> None:
    # The error map imports DuckDB and the data errors only when an error is met: a bad --db is still one line.
    from pathlib import Path

    folder = Path(str(tmp_path))
    done = subprocess.run([sys.executable, "-c", "import sys; from personagap.cli import main; "
                           "sys.argv = ['personagap', 'diagnose', '--db', sys.argv[1]]; main()", str(folder)],
                          capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "directory" in done.stderr
