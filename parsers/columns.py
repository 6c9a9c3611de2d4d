"""Read chosen fields of a JSON array of objects straight into columns.

Building one Python object per event is what makes trace loading slow and memory-hungry. A parser
declares the fields it needs (a key, or a key of a nested object such as ``args``, and how to read
it); a ``Reader`` turns a piece of the array into one column per field. The native reader
(``parsers/_scan.c``) makes Python objects only for distinct strings; where it was not built,
msgspec decodes structs generated from the same fields, with the same results.
"""

from __future__ import annotations

import contextlib
import decimal
import functools
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

try:
    from traceanalyzer.parsers import _scan
except ImportError:  # no C compiler at install time: the msgspec reader does the same, slower
    _scan = None

NATIVE_MISSING = (
    "the native trace reader (traceanalyzer.parsers._scan) is not built here, so traces are read with msgspec, "
    "about 2x slower; reinstall with a C compiler present (pip install .), or from the source tree pip install -e ."
)
"""Said once per process (a warning) when the native reader is missing."""
_missing_said = False


def native() -> Any:
    """The native module (parsers/_scan.c), or None where it was not built (read at each call: a test may take it
    away, as an install without a C compiler has it)."""
    return _scan


def _say_native_missing() -> None:
    global _missing_said
    if not _missing_said:
        _missing_said = True
        warnings.warn(NATIVE_MISSING, stacklevel=3)


ABSENT = np.iinfo(np.int64).min
"""A numeric field that is missing or null."""
NULLABLE = 16
"""Flag on a field kind: ``null`` is allowed (read as absent) instead of making the element invalid."""


class Read(IntEnum):
    """How a field's value is read (and which JSON types are valid for it)."""

    TEXT = 0
    """A string."""
    ID = 1
    """A string or an integer, as text (``7`` and ``"7"`` are the same value)."""
    RAW = 2
    """Any value, as its JSON text."""
    NS = 3
    """A µs number (or a string holding one) as int64 ns, through float64 (``floor(v) * 1000 + rint(frac * 1000)``)."""
    EXACT_NS = 4
    """A µs number (or a string holding one) as int64 ns from its decimal digits, truncated: for epoch timestamps
    beyond float64's ns digits."""
    INT = 5
    """An integer, a number (truncated) or a numeric string (decimal or 0x hex); ``NO_ROW`` if not numeric."""
    OBJECT = 6
    """A nested object: 1 where present, else 0. Fields under its key are read from it."""


_TEXT_READS = (Read.TEXT, Read.ID, Read.RAW)


@dataclass(frozen=True)
class Field:
    """One column: the key path to read, how, and the value where the key is missing."""

    name: str
    path: tuple[str, ...]
    read: Read
    nullable: bool = False
    default: str | None = None
    """Text reads: the text where missing (None: absent, code -1). Numeric reads are ABSENT where missing."""


Coded = tuple[np.ndarray, list[str]]
"""A text column as (int32 codes, distinct values); code -1 is absent."""


@dataclass
class Columns:
    """One piece's columns by field name, with how many elements were read, skipped and repaired."""

    rows: int
    skipped: int
    """Elements that are not objects or have a field of the wrong type."""
    repaired: int
    """Byte sequences in the piece that are not UTF-8 (text values read them as U+FFFD)."""
    values: dict[str, np.ndarray | Coded]


class MalformedJSON(ValueError):
    """The piece is not a sequence of JSON values separated by commas."""


class TooDeep(ValueError):
    """The piece nests arrays or objects deeper than the reader goes (MAX_DEPTH levels for the native reader,
    Python's recursion limit for msgspec)."""


MAX_DEPTH = 512
"""Levels of nesting the native reader reads (``MAX_DEPTH`` in parsers/_scan.c); deeper raises TooDeep."""


def int_or_no_row(value: Any) -> int:
    """An int from an int, a float or a numeric string (decimal or 0x hex); NO_ROW (-1) otherwise."""
    if isinstance(value, str):
        for convert in (int, float, functools.partial(int, base=0)):
            try:
                value = convert(value)
                break
            except ValueError:
                continue
    if isinstance(value, int | float) and value == value and abs(value) < 2**63:
        return int(value)
    return -1


class Reader:
    """Turns a piece of a JSON array (its elements, comma-separated, without brackets) into Columns.

    Both readers give the same columns; the known differences: a string with a lone UTF-16 surrogate escape
    (``"\\ud800"``) is read as U+FFFD by the native reader, while msgspec refuses the piece; and nesting between
    MAX_DEPTH levels and Python's recursion limit (about 1,000) is TooDeep for the native reader only.
    """

    def __init__(self, fields: tuple[Field, ...], native: bool | None = None) -> None:
        self.fields = fields
        self.native = _scan is not None if native is None else native
        if native is None and _scan is None:
            _say_native_missing()
        if self.native and _scan is None:
            raise RuntimeError("the native reader (parsers/_scan.c) was not built")
        self._spec = tuple((f.path, f.read | (NULLABLE if f.nullable else 0), _native_default(f)) for f in fields)
        self._structs: _Structs | None = None

    def __call__(self, piece: bytes) -> Columns:
        """The piece's columns; MalformedJSON if it is not valid JSON."""
        rows, skipped, values = self._native(piece) if self.native else self._msgspec(piece)
        return Columns(rows, skipped, _not_utf8(piece), values)

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_structs": None}  # rebuilt where unpickled: generated types do not pickle

    def _native(self, piece: bytes) -> tuple[int, int, dict]:
        try:
            rows, skipped, raw = _scan.scan(piece, self._spec, int_or_no_row)
        except RecursionError as e:
            raise TooDeep(str(e)) from None
        except ValueError as e:
            raise MalformedJSON(str(e)) from None
        values = {
            f.name: (np.frombuffer(v[0], np.int32), v[1]) if f.read in _TEXT_READS else np.frombuffer(v, np.int64)
            for f, v in zip(self.fields, raw, strict=True)
        }
        return rows, skipped, values

    def _msgspec(self, piece: bytes) -> tuple[int, int, dict]:
        if self._structs is None:
            self._structs = _Structs(self.fields)
        items, skipped = self._structs.decode(piece)
        values, invalid = self._structs.columns(items)
        return len(items) - invalid, skipped + invalid, values


def _native_default(f: Field) -> str | int | None:
    if f.read is Read.OBJECT:
        return 0
    return f.default if f.read in _TEXT_READS else ABSENT


def texts_in(coded: Coded, texts: set[str] | frozenset[str], fold: Callable[[str], str] | None = None) -> np.ndarray:
    """Rows whose text is one of ``texts`` (after ``fold``)."""
    codes, uniques = coded
    hit = np.array([(fold(u) if fold else u) in texts for u in uniques] + [False], dtype=bool)
    return hit[codes]  # code -1 (absent) takes the last entry


class Interner:
    """Codes of text values across chunks, so each distinct value is stored once in the table."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {"": 0}

    def merge(self, coded: Coded) -> np.ndarray:
        """Global codes of a chunk's locally coded values (absent, code -1, becomes '')."""
        codes, uniques = coded
        setdefault, table = self.codes.setdefault, self.codes
        remap = np.array([setdefault(v, len(table)) for v in uniques] + [0], dtype=np.int32)
        return remap[codes]  # code -1 takes the last entry: ''

    def categorical(self, parts: list[np.ndarray]) -> pd.Categorical:
        """The coded values as text, with only the categories in use, in order of first appearance."""
        codes = np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)
        used = np.bincount(codes, minlength=len(self.codes)) > 0
        remap = np.cumsum(used, dtype=np.int32) - 1
        categories = np.asarray(list(self.codes), dtype=object)[used]
        return pd.Categorical.from_codes(remap[codes], categories=pd.Index(categories, dtype=object))


# ---------------------------------------------------------------- the msgspec reader

_TYPES: dict[Read, Any] = {
    Read.TEXT: str,
    Read.ID: int | str,
    Read.RAW: msgspec.Raw,
    Read.NS: float | str,
    Read.EXACT_NS: int | decimal.Decimal,  # msgspec reads a Decimal from a number or a numeric string
    Read.INT: int | float | str,
}


class _Structs:
    """msgspec struct types generated from the fields, their decoders, and where each field's value is."""

    def __init__(self, fields: tuple[Field, ...]) -> None:
        self.fields = fields
        self.attrs = {f: f"f{i}" for i, f in enumerate(fields)}
        members: dict[str, list[tuple[str, str, Any, Any]]] = {}
        for f in fields:
            if f.read is not Read.OBJECT:
                owner = f.path[0] if len(f.path) > 1 else ""
                members.setdefault(owner, []).append((f.path[-1], self.attrs[f], *_member_type(f)))
        self.empty = {}
        top = members.pop("", [])
        for key, inner in members.items():
            nested = _struct(f"Nested{len(self.empty)}", inner)
            self.empty[key] = nested()
            top.append((key, _nested_attr(key), nested | None, None))
        element = _struct("Element", top)
        self.many = msgspec.json.Decoder(list[element])
        self.one = msgspec.json.Decoder(element)
        self.raw = msgspec.json.Decoder(list[msgspec.Raw])

    def columns(self, items: list) -> tuple[dict[str, np.ndarray | Coded], int]:
        """The decoded elements' columns, as the native reader makes them, and how many were invalid (dropped)."""
        owners = {"": items}
        for key, empty in self.empty.items():  # absent nested objects read as their defaults
            owners[key] = [empty if x is None else x for x in map(attrgetter(_nested_attr(key)), items)]
        bad = {i for f in self.fields if f.read in (Read.NS, Read.EXACT_NS) for i in self._non_numbers(f, owners)}
        if bad:
            owners = {key: [x for i, x in enumerate(xs) if i not in bad] for key, xs in owners.items()}
        out: dict[str, np.ndarray | Coded] = {}
        for f in self.fields:
            if f.read is Read.OBJECT:
                empty = self.empty[f.path[0]]
                out[f.name] = np.array([x is not empty for x in owners[f.path[0]]], dtype=np.int64)
            else:
                out[f.name] = _convert(f, self._values(f, owners))
        return out, len(bad)

    def _values(self, f: Field, owners: dict[str, list]) -> list:
        return list(map(attrgetter(self.attrs[f]), owners[f.path[0] if len(f.path) > 1 else ""]))

    def _non_numbers(self, f: Field, owners: dict[str, list]) -> list[int]:
        """Rows whose time field is not a number in range (msgspec lets any string or Decimal through)."""
        values = self._values(f, owners)
        bad: list[int] = []
        if {str, decimal.Decimal} & set(map(type, values)):
            bad = [i for i, v in enumerate(values) if not _is_number(v)]
            values = [None if not _is_number(v) else v for v in values] if bad else values
        return bad + np.flatnonzero(_ns(values, f.read is Read.EXACT_NS) == _OUT_OF_RANGE).tolist()

    def decode(self, piece: bytes) -> tuple[list, int]:
        """(decoded elements, elements skipped for wrong types); bytes that are not UTF-8 are read as U+FFFD."""
        data = b"[" + piece + b"]"
        try:
            return self._decode(data)
        except RecursionError:
            raise TooDeep("nested too deeply") from None
        except msgspec.DecodeError as e:
            fixed = _repair_utf8(data)
            if fixed is None:
                raise MalformedJSON(str(e)) from None
        try:
            return self._decode(fixed)
        except msgspec.DecodeError as e:
            raise MalformedJSON(str(e)) from None

    def _decode(self, data: bytes) -> tuple[list, int]:
        try:
            return self.many.decode(data), 0
        except msgspec.ValidationError:
            pass
        items = self.raw.decode(data)
        kept = []
        for item in items:
            with contextlib.suppress(msgspec.ValidationError):
                kept.append(self.one.decode(item))
        return kept, len(items) - len(kept)


def _member_type(f: Field) -> tuple[Any, Any]:
    """A field's msgspec type and default."""
    if f.read is Read.RAW:
        return msgspec.Raw, msgspec.Raw(b"")
    kind = _TYPES[f.read]
    return (kind | None if f.nullable else kind), (f.default if f.read in _TEXT_READS else None)


def _struct(name: str, members: list[tuple[str, str, Any, Any]]) -> type:
    return msgspec.defstruct(
        name,
        [(attr, kind, default) for _, attr, kind, default in members],
        rename={attr: key for key, attr, _, _ in members},
        gc=False,
    )


def _nested_attr(key: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in key)


_REPLACEMENT = "\ufffd".encode()


def _not_utf8(piece: bytes) -> int:
    """Byte sequences in ``piece`` that are not UTF-8 (each is read as one U+FFFD)."""
    if piece.isascii():
        return 0
    try:
        piece.decode("utf-8")
        return 0
    except UnicodeDecodeError:
        return piece.decode("utf-8", "replace").count("\ufffd") - piece.count(_REPLACEMENT)


def _repair_utf8(data: bytes) -> bytes | None:
    """``data`` with invalid UTF-8 replaced by U+FFFD, or None when it was valid (so the problem is elsewhere)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return None


_NUMBER = re.compile(r" *-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)? *")


def _is_number(value: object) -> bool:
    if isinstance(value, str):
        return _NUMBER.fullmatch(value) is not None
    return not isinstance(value, decimal.Decimal) or value.is_finite()


def _convert(f: Field, values: list) -> np.ndarray | Coded:
    """A field's decoded values as the native reader's column."""
    if f.read in _TEXT_READS:
        return _coded([bytes(v) or None for v in values] if f.read is Read.RAW else values)
    if f.read is Read.INT:
        return _ints(values)
    return _ns(values, exact=f.read is Read.EXACT_NS)


def _coded(values: list) -> Coded:
    """(codes, distinct values as text) in order of first appearance; None is code -1."""
    uniques = [v for v in dict.fromkeys(values) if v is not None]
    index = dict(zip(uniques, range(len(uniques)), strict=True))
    index[None] = -1
    codes = np.fromiter(map(index.__getitem__, values), np.int32, len(values))
    return codes, [_text(v) for v in uniques]


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _ints(values: list) -> np.ndarray:
    """Optional ints (or numbers written as strings) → int64, ABSENT for None and NO_ROW for non-numbers."""
    if None not in values:
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            return np.array(values, dtype=np.int64)
    items = np.array(values, dtype=object)
    present = np.not_equal(items, None)
    out = np.full(len(values), ABSENT, dtype=np.int64)
    try:
        out[present] = items[present].astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        out[present] = [int_or_no_row(v) for v in items[present]]
    return out


_MAX_US = 9.2e15
"""Beyond this many µs, ns overflow int64: such a time makes its element invalid (as in parsers/_scan.c)."""
_OUT_OF_RANGE = ABSENT + 1
"""What ``_ns`` gives for such a time."""


def _ns(values: list, exact: bool) -> np.ndarray:
    """µs numbers (float, int, Decimal or numeric str; None is ABSENT) → integer ns, exactly where the input allows;
    _OUT_OF_RANGE where ns would overflow int64."""
    present = [float(v) if isinstance(v, str) else v for v in values if v is not None]
    if exact:
        with decimal.localcontext() as context:
            context.prec = 200  # exact for any timestamp: truncate the digits, do not round them
            ns = [int(decimal.Decimal(v).scaleb(3)) for v in present]
        out = np.array([n if abs(n) < 2**63 else _OUT_OF_RANGE for n in ns], dtype=np.int64)
    else:
        arr = np.asarray(present, dtype=np.float64)
        wild = ~(np.abs(arr) < _MAX_US)
        arr[wild] = 0
        whole = np.floor(arr)
        out = whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000).astype(np.int64)
        out[wild] = _OUT_OF_RANGE
    if len(present) == len(values):
        return out
    full = np.full(len(values), ABSENT, dtype=np.int64)
    full[[v is not None for v in values]] = out
    return full
