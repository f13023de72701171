"""The ``@autotune`` decorator: a kernel and its options, checked once into a
:class:`~numbatune.spec.KernelSpec`, become a :class:`~numbatune.dispatch.TunedKernel`."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from numbatune._backend import require_a_backend
from numbatune.config import OnMiss, Timing, check_environment
from numbatune.dispatch import TunedKernel
from numbatune.launch.config import LaunchConfig
from numbatune.spec import OPTIONS, KernelSpec
from numbatune.strategies import Budget
from numbatune.tuning import checks, levels
from numbatune.variants import Variant


def autotune(
    kernel: Any = None,
    *,
    variants: Iterable[Variant | Mapping[str, Any]],
    launch: Callable[..., LaunchConfig],
    key: str | Sequence[str] | Callable[..., Hashable] | None = None,
    name: str | None = None,
    level: str | None = None,
    prune: levels.Prune | None = None,
    check: bool | checks.Check | None = None,
    read_only: Sequence[str] = (),
    search: str | None = None,
    budget: Budget | int | str | None = None,
    valid: Callable[..., bool] | None = None,
    on_miss: OnMiss | str | None = None,
    timing: Timing | str | None = None,
) -> Any:
    """Make a numba CUDA kernel tune its compile-time parameters on first use of each key.

    Each variant is compiled as a kernel of its own in which the global names it sets are
    constants. The first call for a key measures the variants on copies of the arguments and
    launches the fastest; later calls with the same key launch it directly. Use it as
    ``@autotune(variants=..., launch=...)`` above ``@cuda.jit``.

    Parameters
    ----------
    kernel
        A ``numba.cuda.jit`` kernel or a plain Python kernel function. Leave it out to use
        ``autotune(...)`` as a decorator.
    variants
        The points of the tuning space: dicts of the global names the kernel reads and their
        values, or `Variant` objects, which also carry ``numba.cuda.jit`` options and a
        priority. `product` builds them from lists of values. At least one.
    launch
        Called as ``launch(*args, **params)`` with the call's arguments and the parameters of a
        variant that it names (all of them if it takes ``**kwargs``); returns ``(grid, block)``
        or ``(grid, block, dynamic_shared_memory_bytes)``. Wrapped in `by_shape` (for a launch
        function that depends only on the arrays' shapes and dtypes and the other arguments'
        values), it is called once per variant and such value, and a cache hit does not call
        it.
    key
        Which calls share a tuning result. None (the default): calls whose array arguments
        have the same shapes rounded up to powers of two (`anchor`), dtypes and layouts, and
        whose boolean arguments (mode flags, which select code paths) have the same values. A
        name or a list of names: for each named array its anchored shape, dtype and layout, for
        each named scalar its value. A function: called with the kernel's arguments, its (hashable)
        result. The dtype, layout and number of dimensions of every array argument are always
        part of the key.
    name
        The tuned kernel's name in messages and logs; by default the kernel function's name.
    level
        How many priority groups of the variants a key's tuning tries: ``"minimal"`` the
        variants of the highest `Variant` priority only, ``"balanced"`` two groups,
        ``"extensive"`` three, ``"full"`` all; the next group is tried only when all of them
        fail. None: the ``level`` setting (``NUMBATUNE_LEVEL``, default ``"full"``).
    prune
        ``prune(key, variants)`` returns the variants worth trying for a key, before any is
        compiled.
    check
        True, or a `Check` (tolerances, a reference), compares every variant's outputs with a
        reference while a key is tuned (by default the kernel as written, run itself): a
        variant that disagrees cannot win, and the report says where it differed. None: the
        ``check`` setting (``NUMBATUNE_CHECK``, default off).
    read_only
        Names of arguments the kernel only reads (through device functions, say). Every run
        while tuning starts from the arguments as the caller passed them: arrays a run may
        change are copied back before each run, outside the timed region. Arrays the kernel's
        own code only reads or only writes are found from its source and not copied either.
    search
        How a key's tuning chooses the variants it measures: a `Strategy` or its value
        (``"auto"``, ``"exhaustive"``, ``"pattern"``, ``"model"``, ``"random"``). None: the
        ``search`` setting (``NUMBATUNE_SEARCH``, default ``"auto"``).
    budget
        When a search stops: a `Budget`, a number of variants, or its text (``"200"``,
        ``"60s"``, ``"200,60s"``, ``"unlimited"``). An exhaustive tuning ignores it. None: the
        ``search_budget`` setting (default 100 variants).
    valid
        Called like ``launch``, as ``valid(*args, **params)``: whether a variant may run on
        these arguments (a tile that must divide the size, say). A key's tuning tries only the
        variants valid for the arguments it is tuned with; a call for which the key's winner is
        not valid launches the fastest variant measured for that key that is, and raises
        ``ValueError`` when none is. None: every variant may run on any arguments.
    on_miss
        What a call does with a key that has no stored result: an `OnMiss` or its value
        (``"tune"``, ``"nearest"``, ``"background"``, ``"error"``); ``tune(...)`` always tunes.
        None: the ``on_miss`` setting (``NUMBATUNE_ON_MISS``, default ``"tune"``).
    timing
        How a key's tuning times the variants: a `Timing` or its value (``"launches"``,
        ``"graph"``: for a kernel that will run inside graphs); a stored result serves a
        tuning only when timed as it asks. None: the ``timing`` setting (``NUMBATUNE_TIMING``,
        default ``"launches"``).

    Returns
    -------
    TunedKernel
        The tuned kernel; or, with ``kernel`` left out, a decorator that makes one.

    Raises
    ------
    TypeError
        An option of the wrong kind: a kernel that is neither a function nor a numba kernel, a
        launch or prune that is not callable, variants that are not dicts or `Variant`
        objects, a read_only that is not a list of names, a name that is not a string, a budget
        of another type. The message names the kernel and the option.
    ValueError
        An option with a wrong value: no variants, or one listed twice; a variant parameter
        that neither the kernel, its device functions, the launch function nor ``valid`` uses
        (the message names the closest global the kernel reads), or that the kernel assigns or
        takes as an argument; an unknown level or search; ``read_only``
        names that are not arguments; a budget that cannot be read; a parameter of the launch
        function that neither the kernel's arguments nor any variant give a value, with no
        default; an unknown ``on_miss`` or ``timing``; an empty name. At a call: no variant
        valid for the arguments (``valid``).
    ImportError
        ``search="model"`` without scikit-learn installed.

    Examples
    --------
    ```python
    BLOCK = 128

    @nt.autotune(
        variants=nt.product(BLOCK=[64, 128, 256]),
        launch=lambda x, out, *, BLOCK: (nt.cdiv(out.shape[0], BLOCK), BLOCK),
    )
    @cuda.jit
    def double(x, out):
        i = cuda.blockIdx.x * BLOCK + cuda.threadIdx.x
        if i < out.shape[0]:
            out[i] = 2 * x[i]
    ```
    """

    given = {option: value for option, value in locals().items() if option in OPTIONS}
    require_a_backend()
    check_environment()

    def make(kernel: Any) -> TunedKernel:
        return TunedKernel(KernelSpec(**{**given, "kernel": kernel}))

    return make if kernel is None else make(kernel)
