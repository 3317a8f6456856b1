"""Strict readers for release files: every error names file, line and field.

Every way a file can be unreadable or malformed ends here as a :class:`DataError` (one line, the
value it quotes cut short), never as another exception: bytes that are not UTF-8, lone surrogate
escapes, nesting too deep, a directory or a symlink loop where a file should be, numbers out of
the range the store holds. A UTF-8 byte-order mark is skipped and CRLF line ends are read like LF.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

from personagap.datasets import record_meta
from personagap.records import DatasetRecord, DatasetScale, ItemKind, Run, ScaleKind, Stage
from personagap.store import RELEASE_KEY, ImportBatch, git_sha, now

T = TypeVar("T")

INT32 = (-(2**31), 2**31 - 1)
"""What an INTEGER column of the store holds (prompt_index, position)."""
INT64 = (-(2**63), 2**63 - 1)
"""What any integer of a release may be (a BIGINT); larger numbers are an error, not a crash at write."""
ECHO_CHARS = 80
"""Longest quoted value in an error message: a 30 MB field must not land on stderr."""
_MESSAGE_CHARS = 400
_BOM = b"\xef\xbb\xbf"
# Control characters would break the one-line promise (or move a terminal's cursor): shown escaped.
_ONE_LINE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)} | {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so it prints as one line."""
    return text.translate(_ONE_LINE)


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` unquoted, cut to ``limit`` characters plus '…' (for ids named in a message)."""
    return text if len(text) <= limit else text[:limit] + "…"


def cut(value: object, limit: int = ECHO_CHARS) -> str:
    """A value as quoted in an error message: its repr, cut to ``limit`` characters plus '…'."""
    text = repr(value[: limit + 1]) if isinstance(value, str | bytes) else _json_short(value, limit + 1)
    return text if len(text) <= limit else text[:limit] + "…"


def _json_short(value: object, limit: int) -> str:
    try:
        text = orjson.dumps(value, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = object.__repr__(value)
    return text[:limit + 1]


class DataError(ValueError):
    """A release file does not have the expected format.

    The message always reads ``FILE:LINE: field 'NAME': what is wrong``, so that a
    user can open the file at the offending line. It is one line and never longer than a few
    hundred characters, whatever value the file held.
    """

    def __init__(self, path: str | Path, line: int | str | None, field: str | None, message: str) -> None:
        """Build the error from where it was found and what is wrong."""
        self.path, self.line, self.field = str(path), line, field
        where = f"{path}:{line}" if line is not None else str(path)
        what = f"field {cut(field, ECHO_CHARS)[1:-1]!r}: " if field else ""
        message = message if len(message) <= _MESSAGE_CHARS else message[:_MESSAGE_CHARS] + "…"
        super().__init__(one_line(f"{where}: {what}{message}"))


class Row:
    """One JSON object read from a file, with typed, located field access."""

    __slots__ = ("data", "path", "line", "prefix")

    def __init__(self, data: dict[str, Any], path: str | Path, line: int | str | None, prefix: str = "") -> None:
        """Wrap ``data`` found at ``path:line``; ``prefix`` names the enclosing field for nested objects."""
        self.data, self.path, self.line, self.prefix = data, path, line, prefix

    def error(self, field: str, message: str) -> DataError:
        """Return a :class:`DataError` located at this row and ``field``."""
        return DataError(self.path, self.line, self.prefix + field, message)

    def get(self, field: str, kind: type[T] | tuple[type, ...], *, optional: bool = False) -> T:
        """Return ``field`` checked against ``kind``.

        Integers must fit 64 bits and floats must be finite (what the store can hold).

        Args:
            field: The key.
            kind: The expected Python type(s); ``bool`` never passes as ``int``.
            optional: Return None when the key is absent or null instead of failing.

        Raises:
            DataError: The key is missing, null (unless optional), of another type or out of range.
        """
        if field not in self.data or self.data[field] is None:
            if optional:
                return None  # type: ignore[return-value]
            raise self.error(field, "missing" if field not in self.data else "is null")
        value = self.data[field]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(field, f"expected {_names(kinds)}, got boolean {value!r}")
        if isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
            raise self.error(field, f"integer {cut(value)} is out of range (64-bit)")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(field, f"number {value!r} is not finite")
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            return value  # type: ignore[return-value]
        if not isinstance(value, kinds):
            raise self.error(field, f"expected {_names(kinds)}, got {type(value).__name__} {cut(value)}")
        return value  # type: ignore[return-value]

    def integer(self, field: str, lo: int = 0, hi: int = INT32[1], *, optional: bool = False) -> int:
        """Return an integer field within ``[lo, hi]`` (by default a non-negative 32-bit index)."""
        value = self.get(field, int, optional=optional)
        if value is not None and not lo <= value <= hi:
            raise self.error(field, f"{cut(value)} is outside [{lo}, {hi}]")
        return value

    def number(self, field: str, lo: float = 0.0, hi: float = 1.0, *, optional: bool = False) -> float:
        """Return a number field within ``[lo, hi]`` (by default a rate or confidence in [0, 1])."""
        value = self.get(field, float, optional=optional)
        if value is not None and not lo <= value <= hi:
            raise self.error(field, f"{cut(value)} is outside [{lo:g}, {hi:g}]")
        return value

    def text(self, field: str, *, optional: bool = False, allow_empty: bool = False) -> str:
        """Return a string field; empty strings fail unless ``allow_empty``."""
        value = self.get(field, str, optional=optional)
        if value is not None and not allow_empty and not value.strip():
            raise self.error(field, "is empty")
        return value

    def objects(self, field: str, *, allow_empty: bool = True) -> list[Row]:
        """Return a list-of-objects field as located sub-rows (``field[i].name``)."""
        values = self.get(field, list)
        if not values and not allow_empty:
            raise self.error(field, "is an empty list")
        out = []
        for i, value in enumerate(values):
            if not isinstance(value, dict):
                raise self.error(f"{field}[{i}]", f"expected an object, got {type(value).__name__}")
            out.append(Row(value, self.path, self.line, f"{self.prefix}{field}[{i}]."))
        return out

    def choice(self, field: str, allowed: tuple[str, ...]) -> str:
        """Return a string field that must be one of ``allowed``."""
        value = self.get(field, str)
        if value not in allowed:
            raise self.error(field, f"unknown value {cut(value)}; expected one of {', '.join(allowed)}")
        return value


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)


def read_bytes(path: str | Path) -> bytes:
    """The bytes of a release file, or a :class:`DataError` saying why it cannot be read.

    Anything but a regular file is refused before it is opened (a FIFO named ``*.jsonl`` would
    block forever); a directory, a symlink loop, a missing or unreadable file each get their line.
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise DataError(path, None, None, "is a directory, not a file")
        if not stat.S_ISREG(mode):
            raise DataError(path, None, None, "is not a regular file")
        with path.open("rb") as handle:
            return handle.read()
    except OSError as exc:
        reason = "symlink loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise DataError(path, None, None, f"cannot read: {reason}") from exc


@dataclass(frozen=True)
class Release:
    """A release being imported: what names its files in the store, wherever its folder lies.

    A file's identity is ``<adapter>:<prefix><path relative to root>`` (e.g.
    ``recenter:stage2/llm_relevance/gpt-5.4.jsonl``), not its absolute path: a re-import of a release
    copied or moved to another folder replaces what the earlier import wrote, labels of rows that are gone
    included (see :func:`personagap.store.write_batch`).

    Attributes:
        adapter: The importer's name (``recenter``, ``laps``, ...).
        root: The folder file paths are taken relative to (a single file's own folder).
        prefix: Put before the relative path: a team's own files (``extraction-jsonl``) are told apart by
            their folder's name, published releases need none (there is one Re-Centering release).
    """

    adapter: str
    root: Path
    prefix: str = ""

    @classmethod
    def of(cls, adapter: str, path: str | Path, *, named_by_folder: bool = False) -> Release:
        """The release read from ``path``: a folder (the release root) or one file of it (its folder)."""
        path = Path(path)
        root = path if path.is_dir() else path.parent
        prefix = (Path(os.path.abspath(root)).name + "/") if named_by_folder else ""
        return cls(adapter, root, prefix)

    @property
    def scope(self) -> str:
        """What every file identity of this release starts with."""
        return f"{self.adapter}:{self.prefix}"

    def file(self, path: str | Path) -> str:
        """``path`` relative to the release root, with ``/`` separators (the prefix included)."""
        given, root = os.path.abspath(path), os.path.abspath(self.root)
        if os.path.commonpath([given, root]) != root:  # reached through a symlink: compare real paths
            given, root = real_path(path), real_path(self.root)
        relative = os.path.relpath(given, root) if os.path.commonpath([given, root]) == root else Path(path).name
        return self.prefix + Path(relative).as_posix()

    def identity(self, path: str | Path) -> str:
        """The store's name of one file of this release (what its run id hashes)."""
        return f"{self.adapter}:{self.file(path)}"


def run_id_for(path: str | Path, release: Release | None = None) -> str:
    """The run id of an imported file: a hash of its release identity (else of its absolute, resolved path).

    Where the file is, not its content, names the run: a re-import of a changed file replaces what its
    earlier import wrote (see :func:`personagap.store.write_batch`), and a byte-identical file under
    another name is another run. With ``release``, the identity is the file's place in the release
    (:meth:`Release.identity`), so a copy of the release in another folder is the same run.
    """
    key = release.identity(path) if release is not None else real_path(path)
    return "import-" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def real_path(path: str | Path) -> str:
    """The absolute path with every symlink resolved: what names an imported file (or folder) in the store."""
    # realpath, not Path.resolve(): it never raises on a symlink loop (the read reports that).
    return os.path.realpath(path)


def import_run(path: str | Path, data: bytes, rater: str | None, parameters: dict[str, Any] | None = None,
               *, release: Release | None = None) -> Run:
    """The ``runs`` row of one imported file (``data`` = its bytes, whose hash the row records).

    Args:
        path: The file.
        data: Its bytes.
        rater: The rater its labels come from, if one.
        parameters: Recorded with the run.
        release: The release the file belongs to: its identity (``parameters.release``) names the run,
            so a re-import from another folder replaces it. Without one the absolute path does.
    """
    digest = hashlib.sha256(data).hexdigest()[:16]
    named = {RELEASE_KEY: release.identity(path)} if release is not None else {}
    return Run(run_id=run_id_for(path, release), kind="import", source=str(path), rater=rater, git_sha=git_sha(),
               started_at=now(), finished_at=now(), status="finished",
               parameters={"sha256_prefix": digest, "path": real_path(path)} | named | (parameters or {}))


def declare(batch: ImportBatch, stage: Stage, dataset: str, item_kind: ItemKind, scale: ScaleKind,
            categories: tuple[str, ...], question: str, *, with_origin: bool = True) -> None:
    """Store the record of one dataset of a release with the batch (what raters were asked, on what scale).

    Args:
        batch: The import's batch (its ``meta`` is written in the import's transaction).
        stage: The dataset's stage.
        dataset: The dataset key.
        item_kind: What one item is.
        scale: The scale kind.
        categories: The declared categories (ordinal: levels low to high).
        question: The question the study put to its raters.
        with_origin: Also record the dataset's users as real (a published study's); False leaves an origin
            set earlier (``import labels --origin``) as it is.
    """
    record = DatasetRecord(stage=stage, dataset=dataset, item_kind=item_kind,
                           scale=DatasetScale(kind=scale, categories=categories), question=question, declared=True)
    entries = record_meta(record)
    batch.meta.update(entries if with_origin else {k: v for k, v in entries.items() if not k.startswith("origin:")})


def _decode_error(path: Path, line: int | None, exc: orjson.JSONDecodeError) -> DataError:
    msg = exc.msg
    if "utf-8" in msg.lower():
        what = "not valid UTF-8 text"
    elif "surrogate" in msg.lower():
        what = "a lone surrogate escape (\\ud800-\\udfff) is not text"
    elif "depth" in msg.lower() or "recursion" in msg.lower():
        what = "nested too deeply"
    else:
        what = msg
    column = f"; column {exc.colno}" if exc.colno else ""
    return DataError(path, line if line is not None else (exc.lineno or None), None,
                     f"malformed JSON ({what}{column})")


def parse_json(path: str | Path, data: bytes) -> Any:
    """Parse a whole JSON file (LAPS, USR) with orjson: depth-limited, strict UTF-8, no lone surrogates."""
    path = Path(path)
    try:
        return orjson.loads(data[3:] if data.startswith(_BOM) else data)
    except orjson.JSONDecodeError as exc:
        raise _decode_error(path, None, exc) from exc


def read_jsonl(path: str | Path, data: bytes | None = None) -> Iterator[Row]:
    """Yield each non-blank line of a JSONL file as a :class:`Row`.

    Args:
        path: The file (named in every error).
        data: Its bytes, when the caller has read them already (see :func:`read_bytes`).

    Raises:
        DataError: The file cannot be read, or a line is not valid UTF-8 JSON or not an object.
    """
    path = Path(path)
    if data is None:
        data = read_bytes(path)
    if data.startswith(_BOM):
        data = data[3:]
    # bytes.splitlines splits on \n, \r\n and \r only: CRLF files read like LF ones.
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)  # ~3x the stdlib's speed, and it rejects lone surrogates and deep nesting
        except orjson.JSONDecodeError as exc:
            raise _decode_error(path, number, exc) from exc
        if not isinstance(value, dict):
            raise DataError(path, number, None, f"expected a JSON object, got {type(value).__name__}")
        yield Row(value, path, number)


def require_exists(path: str | Path) -> Path:
    """``path`` as a Path, or a :class:`DataError` when nothing (or a broken link) is there."""
    path = Path(path)
    if not path.exists():
        reason = "broken or looping symlink" if path.is_symlink() else "no such file or folder"
        raise DataError(path, None, None, reason)
    return path


def no_rows(path: str | Path) -> DataError:
    """The error of a release file that holds no row (an import that would import nothing)."""
    return DataError(path, None, None, "the file holds no rows: nothing to import")
