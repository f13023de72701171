"""An unfinished tuning's outcomes on disk, so that a tuning cut short goes on where it stopped.

A tuning measured in several batches writes every variant's outcome to its journal after each
batch but the last, beside the key's entry (:func:`numbatune.cache.entry.journal_key`). A later
tuning of the key and checksum, in any process, starts from them where it checks outputs as the
unfinished one did (the same check, or none: which variants were wrong depends on it) and times
alike (:meth:`numbatune.config.Timing.serves`): variants measured before are not measured
again, and their best is measured with the next batch, so every decision compares times of one
measurement. Storing the key's result deletes the journal; a forced retune starts without it.
(Kernel Tuner's cache file resumes tuning runs in the same way.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from numbatune.cache import entry as entries
from numbatune.cache.disk import Folder
from numbatune.config import Timing
from numbatune.tuning import checks
from numbatune.tuning.checks import Check
from numbatune.tuning.results import Outcome
from numbatune.variants import Variant

logger = logging.getLogger("numbatune")


class DiskJournal:
    """The journal of one key's tuning in one function's cache folder."""

    def __init__(
        self,
        folder: Folder,
        key_text: str,
        checksum: str,
        variants: Mapping[str, Variant],
        check: Check | None,
        timing: Timing,
    ) -> None:
        self._folder, self._checksum, self._variants = folder, checksum, variants
        self._stored_under = entries.journal_key(key_text, checksum)
        #: The check's fingerprint (None: no check mode) and the timing: it goes on only with
        #: an unfinished tuning checked and timed alike.
        self._check = None if check is None else checks.fingerprint(check)
        self._timing = timing

    def earlier(self) -> dict[Variant, Outcome]:
        """The outcomes an unfinished tuning of the key recorded, where it checked and timed
        them alike (none if damaged: then it is deleted, with a warning)."""
        stored = self._folder.get(self._stored_under)
        if stored is None:
            return {}
        try:
            return entries.decode_outcomes(
                json.loads(stored), self._variants, self._checksum, self._check, self._timing
            )
        except (ValueError, TypeError) as error:  # DamagedEntry, and JSON that is not JSON
            logger.warning(
                "numbatune: discarded the damaged record of an unfinished tuning (%s, %s)",
                self._stored_under, error,
            )  # fmt: skip
            self.discard()
            return {}

    def record(self, outcomes: Mapping[Variant, Outcome]) -> None:
        """Keep ``outcomes`` (every variant measured so far)."""
        recorded = entries.encode_outcomes(outcomes, self._checksum, self._check, self._timing)
        self._folder.set(self._stored_under, json.dumps(recorded))

    def discard(self) -> None:
        """Forget the recorded outcomes."""
        self._folder.delete(self._stored_under)
