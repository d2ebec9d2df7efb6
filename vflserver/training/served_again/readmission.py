"""Bring a passive party that reconnected back into a served federated model.

A federated model (SplitNN, VIM, AdptVFedConv) is kept served after its job, with every passive
party connected. When a party's daemon restarts, its trained part is gone from its memory but
not from its disk. The daemon asks for a job, the board offers it the served model's job again
(``JobBoard._offer_for``), and it joins if it still holds what the model needs
(``terms``). This thread then has it load its part: the saved alignment
(``Align`` without PSI, whose digest it checks, as ``align_active`` does) and the checkpoint at
the end of training (``Restore``). Tasks run in order on the party, so every inference request
queued after ``Restore`` uses the trained part: from then on the model answers again.
"""

from __future__ import annotations

import threading

import numpy as np
import structlog

from vflcore.data.tables import aligned_digest, ids_digest
from vflcore.errors import PartyLost
from vflcore.job.schedule import Position
from vflcore.psi.cache import alignment_key
from vflcore.wire.names import PSI_ALIGNED_DIGEST
from vflcore.wire.tensors import TensorKey
from vflcore.work_items import Align, Finish, Restore
from vflserver.federation.passive_parties import PassiveParties
from vflserver.training.served_again.terms import RejoinTerms

log = structlog.get_logger(__name__)


class Readmission:
    """The thread that readmits reconnected parties into one served model, until ``stop``."""

    def __init__(
        self,
        parties: PassiveParties,
        own_ids: np.ndarray,
        aligned_ids: np.ndarray,
        terms: RejoinTerms | None = None,
        *,
        position: Position | None = None,
    ) -> None:
        self.parties = parties
        job = parties.job
        #: Each passive party's ID-set digest in training (saved by ``saved_terms``, for a server restart).
        self.id_set_digests = {p: parties.members.member(p).id_set_digest for p in job.passive_parties}
        # The key align_active saved the alignment under: the same job and the same ID sets. A
        # model served again after a server restart brings its terms from disk (``saved_terms``).
        self.terms = terms or RejoinTerms(
            alignment_key(job.job_id, {1: ids_digest(own_ids), **self.id_set_digests}),
            position or Position.after_epoch(job.epochs - 1),  # the served epoch: the best, with validation
        )
        self._digest = aligned_digest(aligned_ids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"readmission-{job.job_id}", daemon=True)

    def start(self) -> None:
        """Accept rejoins from now on, and readmit each party that comes back."""
        self.parties.rejoins.accept(self.terms)
        self._thread.start()

    def stop(self) -> None:
        """Stop readmitting, at once: the next job must not wait out the loop's poll."""
        self._stop.set()
        self.parties.members.wake_waiters()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            party = self.parties.rejoins.next_rejoined(0.5, self._stop.is_set)
            if party is None:
                continue
            try:
                self._readmit(party)
            except Exception as exc:  # it left again, went silent, or aligned differently: never lose the loop
                log.warning("party_not_readmitted", peer=party, error=str(exc) or type(exc).__name__)
                self.parties.liveness.lose(party, f"it reconnected but did not load its trained part: {exc}")

    def _readmit(self, party: int) -> None:
        """Have ``party`` load its alignment and its trained part; fails if it aligned differently."""
        fed, job_id = self.parties, self.parties.job.job_id

        def check() -> None:
            if self._stop.is_set():
                raise PartyLost(party, "the model is no longer served")
            member = fed.members.member(party)
            if not member.online or member.lost is not None or member.failure is not None:
                raise PartyLost(party, fed.liveness.absence(party) or "it left again")

        fed.expect(PSI_ALIGNED_DIGEST, 0, 0, (32,), "uint8", party=party)
        fed.dispatch(lambda tid: Align(tid, self.terms.alignment_key, run_psi=False), parties=[party])
        key = TensorKey(job_id, 0, 0, PSI_ALIGNED_DIGEST)
        try:
            got = fed.uploads.mailbox.take(party, key, timeout=fed.psi_timeout_s, check=check)
        finally:
            fed.forget(PSI_ALIGNED_DIGEST, 0, 0)
        if not np.array_equal(got, self._digest):
            message = f"party {party} aligned its rows differently from the served model; submit the job again"
            fed.rejoins.refuse(party, message)
            fed.dispatch(lambda tid: Finish(tid, False, message), parties=[party])
            raise PartyLost(party, message)
        # The best epoch (validation) may have newer checkpoints: kept, as at the end of training.
        served = self.terms.position
        best = served != Position.after_epoch(fed.job.epochs - 1)
        fed.dispatch(lambda tid: Restore(tid, served, serve=best), parties=[party])
        fed.rejoins.readmitted(party)
