"""What an untrusted pickle may ask of the C unpickler, checked by walking its opcodes before it is loaded.

The C unpickler builds containers without recursion, but hashing a tuple or frozenset nested a million deep (as a
dict key or a set element) recurses in C and kills the process, and a memo index is an allocation (``LONG_BINPUT``
with index 2**31 is gigabytes). ``check`` walks the opcodes once, tracking only how deeply tuples and frozensets
nest and which memo indexes are used, and refuses nesting beyond ``MAX_NESTING`` and a memo index beyond the
file's size. It stops at the first opcode that names a global (the unpickler refuses those itself, before
anything after them is built).
"""

from __future__ import annotations

import pickletools
import struct

MAX_NESTING = 100
"""Tuples and frozensets nested deeper than this are refused (a memory snapshot nests them at most two deep)."""


class Unsafe(ValueError):
    """The pickle would make the unpickler crash or allocate beyond its size."""


_FIXED, _LINE, _LEN1, _LEN4S, _LEN4U, _LEN8 = range(6)
_ARG = {-1: _LINE, -2: _LEN1, -3: _LEN4S, -4: _LEN4U, -5: _LEN8}
_GLOBALS = frozenset(b"c\x93iPQ\x82\x83\x84")  # GLOBAL STACK_GLOBAL INST PERSID BINPERSID EXT1 EXT2 EXT4
_NESTS = frozenset(b"t\x85\x86\x87\x91")  # TUPLE TUPLE1 TUPLE2 TUPLE3 FROZENSET
_PUTS = frozenset(b"pqr")
_GETS = frozenset(b"ghj")
_MEMOIZE, _MARK, _DUP, _EMPTY_TUPLE, _STOP = 0x94, 0x28, 0x32, 0x29, 0x2E


def _table() -> dict[int, tuple[int, int, bool, int, int]]:
    """Per opcode: how its argument is read (kind, fixed size), whether it pops to a mark, items popped (besides
    the mark's slice) and pushed."""
    out = {}
    for op in pickletools.opcodes:
        n = op.arg.n if op.arg is not None else 0
        kind = _ARG.get(n, _FIXED)
        names = [s.name for s in op.stack_before]
        marked = "mark" in names
        popped = names.index("mark") if marked else len(names)
        out[ord(op.code)] = (kind, max(n, 0), marked, popped, len(op.stack_after))
    return out


_OPS = _table()
_LEN_FORMAT = {_LEN1: ("<B", 1), _LEN4S: ("<i", 4), _LEN4U: ("<I", 4), _LEN8: ("<Q", 8)}


def check(data: bytes) -> None:
    """Raise Unsafe where the pickle nests tuples or frozensets deeper than MAX_NESTING or names a memo index
    beyond its size; other damage is left for the unpickler to refuse."""
    stack: list[int] = []
    marks: list[int] = []
    memo: dict[int, int] = {}
    at, end, limit = 0, len(data), len(data)
    while at < end:
        code = data[at]
        at += 1
        op = _OPS.get(code)
        if op is None or code in _GLOBALS or code == _STOP:
            return
        kind, size, marked, popped, pushed = op
        arg = b""
        if kind == _FIXED:
            arg, at = data[at : at + size], at + size
        elif kind == _LINE:
            stop = data.find(b"\n", at)
            if stop < 0:
                return
            arg, at = data[at:stop], stop + 1
        else:
            fmt, width = _LEN_FORMAT[kind]
            if at + width > end:
                return
            (length,) = struct.unpack_from(fmt, data, at)
            at += width + max(length, 0)
        if code == _MARK:
            marks.append(len(stack))
            continue
        if code in (_MEMOIZE, _DUP):
            top = stack[-1] if stack else 0
            if code == _DUP:
                stack.append(top)
            elif len(memo) >= limit:
                raise Unsafe(f"more memo entries than the pickle's {limit:,} bytes")
            else:
                memo[len(memo)] = top
            continue
        depth = 0
        if marked:
            start = marks.pop() if marks else 0
            depth = max(stack[start:], default=0)
            del stack[start:]
        if popped:
            depth = max([depth, *stack[-popped:]])
            del stack[-popped:]
        if code in _PUTS:
            index = _index(code, arg)
            if index > limit:
                raise Unsafe(f"a memo index of {index:,} in a pickle of {limit:,} bytes")
            memo[index] = stack[-1] if stack else 0
        elif code in _NESTS or code == _EMPTY_TUPLE:
            depth += 1
            if depth > MAX_NESTING:
                raise Unsafe(f"tuples or frozensets nested more than {MAX_NESTING} deep")
        elif code in _GETS:
            depth = memo.get(_index(code, arg), 0)
        else:
            depth = 0
        stack.extend([depth] * pushed)


def _index(code: int, arg: bytes) -> int:
    """The memo index of a PUT/GET (decimal line), BINPUT/BINGET (1 byte) or LONG_BINPUT/LONG_BINGET (4 bytes)."""
    if code in b"pg":
        try:
            return int(arg)
        except ValueError:
            return 0
    return int.from_bytes(arg, "little")
