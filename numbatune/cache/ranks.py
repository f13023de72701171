"""Ranks that agree: in a torch.distributed job, a key is tuned by the ranks together.

With more than one rank (and the ``ranks`` setting ``auto``), each tuned kernel's first lookup
of a key in a process is a collective of all ranks, exchanged through the key-value store
torch.distributed was initialised with (no process group has to connect first; every wait is
bounded by ``rank_timeout_s``). The ranks that offer the same key, kind of device and checksum
form a group (:func:`meet`): they take the entry of the lowest member that has one, or split the
variants (member ``i`` of ``n`` measures every ``n``-th from the ``i``-th, at least two each; a
search is not split) and merge the shares alike on every rank (:func:`merge`: the lowest median,
ties in the kernel's order), so every rank stores the same entry and launches the same winner.
Only the level's first set of variants is tried. A rank that dies or comes late makes the others
fail with a :class:`~numbatune.errors.TuningError`, not hang, and fails at once itself (the
exchange is marked abandoned). docs/howto/distributed.md tells users the same.
"""

from __future__ import annotations

import contextlib
import datetime
import pickle
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numbatune.config import Ranks
from numbatune.errors import TuningError
from numbatune.forking import PerProcess

#: The job's ranks (one group; a forked child is not a rank of its parent's group).
_group: PerProcess[RankGroup] = PerProcess()


@dataclass(frozen=True)
class Offer:
    """What a rank brings to a key's tuning."""

    key: str
    kind: str
    checksum: str
    entry: dict[str, Any] | None

    def same_tuning(self, other: Offer) -> bool:
        return (self.key, self.kind, self.checksum) == (other.key, other.kind, other.checksum)


class RankGroup:
    """The ranks of the job, exchanging values through the job's store."""

    def __init__(self, distributed: Any) -> None:
        self.rank, self.size = distributed.get_rank(), distributed.get_world_size()
        store = distributed.distributed_c10d._get_default_store()
        self._store = distributed.PrefixStore("numbatune/", store)
        #: How many exchanges this rank has begun (every rank begins the same ones in order).
        self._exchanges = 0
        self._lock = threading.Lock()

    def gather(self, value: Any, kernel_name: str, key: str, timeout_s: float) -> list[Any]:
        """Every rank's ``value``, in rank order; a :class:`TuningError` when a rank does not
        give its own within ``timeout_s`` (the ``rank_timeout_s`` setting), or gave up waiting
        for this one."""
        with self._lock:
            exchange, self._exchanges = self._exchanges, self._exchanges + 1
        names = [f"{exchange}/{rank}" for rank in range(self.size)]
        abandoned = f"{exchange}/abandoned"
        try:
            self._store.set(names[self.rank], pickle.dumps(value))
            self._store.wait(names, datetime.timedelta(seconds=timeout_s))
            if self._store.check([abandoned]):
                raise RuntimeError("the other ranks stopped waiting for this one")
            gathered = [pickle.loads(self._store.get(name)) for name in names]
        except RuntimeError as error:  # DistStoreError: a wait timed out; a store gone
            with contextlib.suppress(RuntimeError):
                self._store.set(abandoned, b"")
            raise TuningError(
                f"{kernel_name}: the ranks of the torch.distributed job could not tune key "
                f"{key} together: a rank died or did not reach this tuning within "
                f"rank_timeout_s={timeout_s:g} s ({error}). Every rank must meet "
                "the same keys in the same order; NUMBATUNE_RANKS=off tunes each rank alone"
            ) from error
        if exchange:  # every rank has read the one before: this rank's value there can go
            with contextlib.suppress(RuntimeError):
                self._store.delete_key(f"{exchange - 1}/{self.rank}")
        return gathered


def group(setting: Ranks) -> RankGroup | None:
    """The job's ranks when tuning is collective (see the module) and the ``ranks``
    ``setting`` lets them be, else None. Looks at torch.distributed only if torch is
    imported."""
    distributed = getattr(sys.modules.get("torch"), "distributed", None)
    if setting is Ranks.OFF or distributed is None or not distributed.is_available():
        return None
    if not distributed.is_initialized() or distributed.get_world_size() < 2:
        return None
    return _group.get(lambda: RankGroup(distributed))


@dataclass(frozen=True)
class Meeting:
    """What the ranks decided when they met at a key's tuning (see the module)."""

    #: The entry a member of this rank's group offered (the lowest such member's), or None.
    offered: dict[str, Any] | None
    #: The ranks of this rank's group, in rank order.
    members: tuple[int, ...]
    #: How many shares the group tunes (0 when an entry was offered).
    count: int
    #: This rank's place among the members.
    position: int
    #: How many variants the shares split between them.
    space: int

    @property
    def share(self) -> int | None:
        """The share this rank tunes (of :attr:`count`), or None when it tunes none."""
        return self.position if self.position < self.count else None


def meet(
    ranks: RankGroup, kernel_name: str, offer: Offer, split: bool, space: int, timeout_s: float
) -> Meeting:
    """Gather every rank's offer: what this rank's group takes, or tunes in how many shares.
    ``split``: whether the members may split the ``space`` variants between them."""
    offers: list[Offer] = ranks.gather(offer, kernel_name, offer.key, timeout_s)
    members = tuple(rank for rank, other in enumerate(offers) if other.same_tuning(offer))
    offered = [offers[rank].entry for rank in members if offers[rank].entry is not None]
    count = 0 if offered else max(1, min(len(members), space // 2)) if split else 1
    position = members.index(ranks.rank)
    return Meeting(offered[0] if offered else None, members, count, position, space)


def settle(
    ranks: RankGroup,
    kernel_name: str,
    key: str,
    meeting: Meeting,
    share: dict[str, Any] | None,
    order: Mapping[str, int],
    timeout_s: float,
) -> dict[str, Any]:
    """Gather the shares (this rank's: ``{"entry": ...}``, ``{"error": ..., "results": ...}``,
    or None when it tuned none): the entry the group agrees on, an offered one or the merge of
    the shares. ``order``: each variant label's place in the kernel's variants."""
    shares = ranks.gather(share, kernel_name, key, timeout_s)
    if meeting.offered is not None:
        return meeting.offered
    count = meeting.count
    merged = merge([shares[rank] for rank in meeting.members[:count]], kernel_name, key, order)
    return {**merged, "space": meeting.space} if count > 1 else merged


def merge(
    shares: Sequence[dict[str, Any]], kernel_name: str, key: str, order: Mapping[str, int]
) -> dict[str, Any]:
    """One entry from the entries of the shares (``{"entry": ...}``, or ``{"error": ...,
    "results": ...}`` for a share every variant of which failed): every result, the failed
    shares' too (so that the entry covers every variant tried, and the key is not tuned again
    in the next job), the lowest median winning; a :class:`TuningError` if none was timed."""
    entries = [share["entry"] for share in shares if "entry" in share]
    if not entries:
        errors = "\n".join(share["error"] for share in shares)
        raise TuningError(f"{kernel_name}: every share of key {key} failed:\n{errors}")
    failed = [result for share in shares if "error" in share for result in share["results"]]
    results = sorted(
        [*(result for entry in entries for result in entry["results"]), *failed],
        key=lambda result: order[result["variant"]],
    )
    timed = [(r["median_s"], index) for index, r in enumerate(results) if r["median_s"] is not None]
    return {
        **entries[0],
        "best_index": min(timed)[1],
        "checked": all(entry["checked"] for entry in entries),
        **{name: max(e[name] for e in entries) for name in ("compile_s", "benchmark_s", "trial_s")},
        "compiles": sum(entry["compiles"] for entry in entries),
        "results": results,
        "tied": [],  # (the shares were timed apart: their ties are not comparable)
    }
