"""A kernel's parameters, planned once per argument signature (the classes of the arguments,
and for arrays their dtype, rank and layout): the reads that fetch an array's fields, the checks
that hold for arguments of the signature, the default key's elements and a ``struct`` field per
parameter, which :mod:`numbatune.launch.codegen` turns into code. Arrays are read, checked and
packed, and the key composed, in one C call per kind (``_native.Reader``; docs/concepts/
launching.md says how, of which kinds).

Which parameters an argument becomes is the kernel compiler's to say
(:attr:`numbatune.compilers.base.LaunchTarget.parameters`); numba-cuda's layout is not public
API, so numba-cuda must be a version it was written against, and the layout planned must match
the sizes the driver reports for the compiled function. What is not planned is left to the
compiler's launch.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from numbatune import _native, arrays, devices, native
from numbatune.arraykinds import DLPACK_CUDA, ArrayKind, FastRead, kind_of
from numbatune.arrays import buffer_of
from numbatune.compilers.base import (
    ArrayParameters,
    ArrayStructure,
    Conversion,
    Parameters,
    TupleParameters,
)
from numbatune.keys import KeyParts, is_flag

#: The code that gives a scalar parameter field from the argument's expression, by conversion.
_CONVERTED = {
    Conversion.VALUE: "{}",
    Conversion.HALF_BITS: "_half_bits({})",
    Conversion.REAL: "{}.real",
    Conversion.IMAG: "{}.imag",
}


class ArgumentPlan:
    """How one argument signature becomes kernel parameters.

    ``steps`` are ("read", statement) and ("check", condition) in order; with the classes of
    the kernel's arguments (which the generated code checks first), the checks hold for the
    arguments numba types as this signature (classes, and for arrays dtype, rank and layout).
    ``key_parts`` are the elements of the default key, as :func:`numbatune.keys.default_key`
    makes it: the parts of the top-level arrays (anchored shape, dtype name and layout) and
    booleans (their value); each the expression that gives it, and for an array read in C its
    kind and index in that read, where the last read in C composes the whole key.
    ``fields`` are the ``struct`` letters of the kernel parameters, ``values`` the expressions
    that give them (one bytes value for the fields listed in ``packed``), ``reads`` the names of
    the results of the reads in C, ``readers`` their readers and ``read_kinds`` their kinds,
    ``buffers`` the expressions of the arrays' allocations read in Python (for ordering across
    streams where a read gives none: the stream monitor does not watch every launch yet).
    ``parameters`` is the kernel compiler's.
    """

    def __init__(self, parameters: Callable[[Any, Any], Parameters | None]) -> None:
        self._parameters = parameters
        self.steps: list[tuple[str, str]] = []
        self.key_parts: list[tuple[str, ArrayKind | None, int]] = []
        self.fields: list[str] = []
        self.values: list[str] = []
        self.buffers: list[str] = []
        #: The arrays among them of kinds with a current stream, by kind (kept alive when
        #: launched on another stream than their library's current one).
        self.library_arrays: dict[ArrayKind, list[str]] = {}
        #: Fields given as one bytes value, of so many consecutive 8-byte parameters, by the
        #: index of the first.
        self.packed: dict[int, int] = {}
        self.reads: list[str] = []
        self.readers: list[Any] = []
        self.read_kinds: list[ArrayKind] = []
        self.constants: dict[str, Any] = {}
        self._c_reads: dict[ArrayKind, _CReads] = {}

    def constant(self, value: Any) -> str:
        """A name under which the generated code sees ``value``."""
        name = f"_k{len(self.constants)}"
        self.constants[name] = value
        return name

    def close(self) -> None:
        """Add the reads that come after every argument's checks: those in C, one call for all
        the arrays of a library; the last composes the whole default key (its other elements
        given after its arrays)."""
        composer = self._composer()
        for kind, reads in self._c_reads.items():
            result, prefix = f"_{kind.name}_read", f"_{kind.name}"
            items, key = list(reads.arguments), None
            if kind is composer:
                key = []
                for part, of, index in self.key_parts:
                    if of is not kind:
                        index = len(items)
                        items.append(part)
                    key.append(index)
            arrays = "".join(f"{item}, " for item in items)
            if reads.memo is not None:
                source: Any = (*reads.memo, tuple(reads.tokens))
            else:
                source = reads.api or (kind.attributes.names(), kind.stream.getter(),
                                       tuple(reads.dtypes))  # fmt: skip
            reader = _native.Reader(source, b"".join(reads.expected), tuple(reads.parts),
                                    tuple(reads.runs), kind.offset_method,
                                    None if key is None else tuple(key))  # fmt: skip
            runs = "".join(f", {prefix}_f{run}" for run in range(len(reads.runs)))
            read = f"{self.constant(reader.read)}(({arrays}), _order.ordering)"
            self.steps += [
                ("read", f"{result} = {read}"),
                ("check", f"{result} is not None"),
                ("read", f"_, {prefix}_key{runs}, _ = {result}"),
            ]
            self.reads.append(result)
            self.readers.append(reader)
            self.read_kinds.append(kind)
            self.buffers += reads.buffers

    def key(self) -> str:
        """The expression of the default key: the key the last read in C composes (:meth:`close`),
        or, where no array is read in C, the tuple of :attr:`key_parts`."""
        composer = self._composer()
        if composer is not None:
            return f"_{composer.name}_key"
        return f"({''.join(f'{part}, ' for part, _, _ in self.key_parts)})"

    def _composer(self) -> ArrayKind | None:
        """The kind whose read in C composes the whole default key (:meth:`close`), or None."""
        return next(reversed(self._c_reads), None)

    def add(self, argument: str, argtype: Any, value: Any, top: bool = True) -> bool:
        """Plan the parameters of one argument, of the compiler's type ``argtype``; False when
        it has no plan. ``top``: an argument of the kernel (whose class the generated code
        checks with the others', in one call), not a tuple's item."""
        if not top:
            self.steps.append(("check", f"type({argument}) is {self.constant(type(value))}"))
        parameters = self._parameters(argtype, value)
        if isinstance(parameters, ArrayParameters):
            return self._add_array(argument, parameters, value, top)
        if isinstance(parameters, TupleParameters):
            items = parameters.items
            if not isinstance(value, tuple) or len(value) != len(items):
                return False
            self.steps.append(("check", f"len({argument}) == {len(value)}"))
            return all(
                self.add(f"{argument}[{index}]", item_type, item, top=False)
                for index, (item_type, item) in enumerate(zip(items, value, strict=True))
            )
        if parameters is None:
            return False
        if top and is_flag(value):  # a mode flag: in the default key
            self.key_parts.append((argument, None, -1))  # (its class is checked: as there)
        for letter, conversion in parameters.fields:
            self.fields.append(letter)
            self.values.append(_CONVERTED[conversion].format(argument))
        return True

    def _add_array(self, argument: str, parameters: ArrayParameters, value: Any, top: bool) -> bool:
        kind = kind_of(type(value))
        if kind is None or kind.fast is FastRead.NONE:
            return False
        # numba types its own arrays unaligned only for an unaligned record dtype, which their
        # token (the dtype) fixes; of other arrays, only aligned ones are planned.
        aligned = parameters.aligned or kind.fast is FastRead.MEMO
        if not parameters.mutable or not aligned:
            return False
        self.fields += _HEADS[parameters.structure] + ["q"] * (2 * parameters.ndim)
        if kind.fast is FastRead.MEMO:
            self._add_numba_array(argument, value, top, parameters.structure)
            return True
        return self._add_library_array(argument, parameters, value, kind, top)

    def _add_numba_array(
        self, argument: str, value: Any, top: bool, structure: ArrayStructure
    ) -> None:
        """numba-cuda's and numba-cuda-mlir's arrays: their fields are read once per array
        object and kept on it (:func:`numba_array_memo`, :func:`memref_array_memo`), and the
        memos of all the arrays of a kind read in one call of the C extension, keyed and packed
        as :meth:`_add_library_array` says."""
        memo, attribute = _MEMOS[structure]
        kind = kind_of(type(value))
        reads = self._c_reads.setdefault(kind, _CReads(0, memo=(attribute, memo)))
        ndim = len(value.shape)
        expected = native.EXPECTED.pack(
            0, 0, ndim, 0, 0, 0, native.STRUCTURES.index(structure.value), False
        )  # (a memo read takes the rank and structure only)
        self._add_read(reads, kind, argument, value, expected, top)
        reads.tokens.append(memo(value)[0])
        self._add_to_run(reads, f"_{kind.name}_f", structure.head + 2 * ndim)
        reads.buffers.append(f"{self.constant(memo)}({argument})[2]")

    def _add_read(
        self, reads: _CReads, kind: ArrayKind, argument: str, value: Any, expected: bytes, top: bool
    ) -> None:
        """An array read in C with the others of its kind, ``expected`` of it; its part of the
        key in ``_L_key`` where it is a top-level argument."""
        reads.arguments.append(argument)
        reads.expected.append(expected)
        reads.parts.append(KeyParts(*arrays.read(value)[1:]) if top else None)
        if top:
            part = f"_{kind.name}_key[{reads.keyed}]"
            self.key_parts.append((part, kind, len(reads.arguments) - 1))
            reads.keyed += 1

    def _add_library_array(
        self, argument: str, parameters: ArrayParameters, value: Any, kind: ArrayKind, top: bool
    ) -> bool:
        """A torch tensor's or CuPy array's parameters, read in C: through its library's DLPack
        C exchange API where it has one, else by the attributes its kind names; its part of the
        key in ``_L_key`` and its kernel parameters in ``_L_fN`` with those of the arrays read
        before it whose parameters lead up to its, for library ``L`` (:meth:`close` adds the
        read). False where they cannot be (an older torch, with no DLPack C exchange API)."""
        api = _native.dlpack_api(type(value))
        expected = _expected_in_c(api, value, kind, parameters)
        if expected is None:
            return False
        reads = self._c_reads.setdefault(kind, _CReads(api))
        self._add_read(reads, kind, argument, value, expected, top)
        reads.dtypes.append(value.dtype)
        self._add_to_run(reads, f"_{kind.name}_f", parameters.structure.head + 2 * parameters.ndim)
        if kind.stream is not None:
            self.library_arrays.setdefault(kind, []).append(argument)
        # (where the read gives no allocation: ordering across streams had not begun)
        reads.buffers.append(f"{self.constant(kind.buffer)}({argument})")
        return True

    def _add_to_run(self, reads: _CReads, prefix: str, count: int) -> None:
        """The last ``count`` fields, a read in C's array's, are given in the bytes of the
        read's last run where they follow its fields, else in a new run's, ``{prefix}N``."""
        first = len(self.fields) - count
        if reads.runs and reads.end == first:
            self.packed[reads.start] += count
            reads.runs[-1] += 1
        else:
            reads.start = first
            self.packed[first] = count
            self.values.append(f"{prefix}{len(reads.runs)}")
            reads.runs.append(1)
        reads.end = len(self.fields)


def _expected_in_c(
    api: int, value: Any, kind: ArrayKind, parameters: ArrayParameters
) -> bytes | None:
    """What the C extension's read expects of arrays like ``value`` (:data:`numbatune.native.
    EXPECTED`), or None where it cannot read them; ``api`` is the address of their class's
    DLPack C exchange API (0: none)."""
    if api:
        described = _native.describe(api, value)
        if described is None or described[5] != 1:  # (vector types: lanes)
            return None
        device_type, device_id, ndim, code, bits, _ = described
        reads_device = True
    elif kind.attributes is not None and kind.stream is not None:
        device_type, device_id, ndim = DLPACK_CUDA, kind.device(value), parameters.ndim
        code, bits = 0, 8 * parameters.itemsize  # (the dtype object is compared, not the code)
        reads_device = kind.checks_device or devices.several()
    else:
        return None
    return native.EXPECTED.pack(
        device_type, device_id, ndim, code, bits, ord(parameters.layout),
        native.STRUCTURES.index(parameters.structure.value), reads_device,
    )  # fmt: skip


def numba_array_memo(array: Any) -> tuple[str, bytes, int]:
    """What a launch needs of a numba-cuda (or numba-cuda-mlir: the same class, copied) device
    array, kept on it: a token of how numba types it (dtype, layout, rank, and where the process
    sees several GPUs, its GPU), its kernel parameters packed (8 bytes each, as the DLPack reads
    pack them) and the allocation its data lies in."""
    memo = array.__dict__.get("_numbatune")
    if memo is None:
        shim = array._strided_memory_view_shim
        layout = shim._layout
        letter = "C" if layout.is_contiguous_c else "F" if layout.is_contiguous_f else "A"
        dtype = array.dtype
        device = devices.array_device(array) if devices.several() else None
        token = sys.intern(f"{dtype!r}|{letter}|{len(shim.shape)}|{device}")
        ndim = len(shim.shape)
        fields = struct.pack(f"<QQqqQ{2 * ndim}q", 0, 0, shim.size, dtype.itemsize,
                             shim.ptr or 0, *shim.shape, *layout.strides_in_bytes)  # fmt: skip
        memo = array.__dict__["_numbatune"] = (token, fields, buffer_of(array))
    return memo


def memref_array_memo(array: Any) -> tuple[str, bytes, int]:
    """:func:`numba_array_memo`, the parameters of the array a memref descriptor."""
    memo = array.__dict__.get("_numbatune_memref")
    if memo is None:
        token, fields, buffer = numba_array_memo(array)
        values = struct.unpack(f"<{len(fields) // 8}q", fields)
        ndim, itemsize, pointer = (len(values) - 5) // 2, values[3], values[4]
        strides = (stride // itemsize for stride in values[5 + ndim :])
        memref = struct.pack(f"<3q{2 * ndim}q", pointer, pointer, 0, *values[5 : 5 + ndim],
                             *strides)  # fmt: skip
        memo = array.__dict__["_numbatune_memref"] = (token, memref, buffer)
    return memo


#: The ``struct`` letters of an array's fields before its shape, by structure.
_HEADS = {ArrayStructure.NUMBA: ["Q", "Q", "q", "q", "Q"], ArrayStructure.MEMREF: ["Q", "Q", "q"]}
#: How numba's arrays are read once and kept, by structure: the function, and the attribute
#: it keeps them in.
_MEMOS = {
    ArrayStructure.NUMBA: (numba_array_memo, "_numbatune"),
    ArrayStructure.MEMREF: (memref_array_memo, "_numbatune_memref"),
}


@dataclass
class _CReads:
    """The arrays of one library that a fast path reads in C, in one call (their memos, through
    the DLPack C exchange API at ``api``, or, where it is 0, by attribute): for each, its
    expression, what is expected of it, its dtype and the source of its default-key part (None:
    not in the key); ``runs`` the count of arrays of each bytes value the read gives, of
    consecutive parameters, the last starting at field ``start`` and ending before ``end``."""

    api: int
    #: Memo reads (numba's arrays): the attribute their memos are kept in and the function
    #: that makes one; None for the others.
    memo: tuple[str, Any] | None = None
    #: Memo reads: the token each array's memo carries.
    tokens: list[Any] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    expected: list[bytes] = field(default_factory=list)
    dtypes: list[Any] = field(default_factory=list)
    parts: list[tuple[dict[Any, Any], Any] | None] = field(default_factory=list)
    keyed: int = 0
    #: The arrays' allocations in Python, for reads that give none (ordering is not on yet).
    buffers: list[str] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    start: int = 0
    end: int = 0


def half_bits(value: Any) -> int:
    """The bits of a float16 value, as numba passes a float16 parameter."""
    return int(np.float16(value).view(np.uint16))
