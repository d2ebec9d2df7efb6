"""Every error this project raises on purpose: one tree, each class with the status it becomes.

    VflError                   the base; a bare one from a handler fails the call       INTERNAL
    ├── ConfigError            a config file, flag or job document is wrong             local, INVALID_ARGUMENT
    ├── DataError              a party's CSV table cannot be used                       local
    ├── TlsConfigError         a TLS file is missing, unreadable or not PEM             local
    ├── CertsError             a certificate file is missing, unreadable or in the way  local
    │   └── KeyExistsError     issuing would overwrite a private key (no --force)       local
    ├── ArtifactError          a model artifact cannot be written or read               local
    ├── CheckpointError        a training checkpoint is missing or cannot be read       local
    ├── JobStoreError          the job store cannot be opened: made by a newer          local
    │                          vfl-server, or not a job store
    ├── PsiError               a PSI point is malformed or low-order (malicious)        fails the job
    ├── TrainingDiverged       a loss, output or weight became NaN or infinite: the     fails the job
    │                          job's settings make training run away
    ├── DivergedServingBest    training diverged after a best epoch by validation: the  local
    │                          job resumes to serve that epoch
    ├── PermissionDenied       certificate and claim disagree, or the certified party   PERMISSION_DENIED
    │                          is not part of the job
    ├── JoinRejected           the party's data does not fit this job, or it joined     FAILED_PRECONDITION
    │                          after training started
    ├── PartyUnavailable       a party is offline or stopped answering (``party``)      UNAVAILABLE, 503
    │   └── PartyLost          its connection closed or it went silent: the service     UNAVAILABLE
    │                          pauses the job and resumes it from a checkpoint
    ├── Overloaded             a party has too many calls in flight                     RESOURCE_EXHAUSTED
    ├── JobAborted             the job stopped (failure or shutdown)                    ABORTED
    │   └── EmptyIntersection  the parties share no sample ID: nothing to train on      ABORTED
    ├── TensorError            a tensor from a peer failed validation (``field``)       INVALID_ARGUMENT
    │   └── IncompleteStream   its chunk stream ended early (or a cancel: CANCELLED)    INVALID_ARGUMENT
    ├── InferenceInputError    an inference request does not fit the model's inputs     INVALID_ARGUMENT, 400
    ├── ProtocolError          an inference message breaks the protocol                 INVALID_ARGUMENT, 400
    ├── ModelNotFound          no model of that name or version is served               NOT_FOUND, 404
    ├── JobNotFound            no job of that ID in the server's job store              NOT_FOUND
    ├── DuplicateJob           a job of that ID was already submitted                   ALREADY_EXISTS
    ├── JobStateError          the job's state does not allow that change (e.g.         FAILED_PRECONDITION
    │                          cancelling a finished job)
    ├── ServerUnavailable      SDK: the server cannot be reached, or went away          UNAVAILABLE, DEADLINE_EXCEEDED
    └── TensorRejected         SDK: the server refused a tensor or an inference input   INVALID_ARGUMENT

The last column is the gRPC status a server answers with when a handler raises the error (a
number: the REST inference endpoint's HTTP status); for the two "SDK:" classes, the statuses the
SDK turns into them. A "local" error never crosses the wire: the daemon or CLI that meets it
prints it and exits (but the Control API refuses a job document that raises ConfigError with
INVALID_ARGUMENT). Servers read the column from one table, ``vflcore.status.STATUS``, on every
surface: the federation, the Control API and inference; there the standard ``TimeoutError``
becomes DEADLINE_EXCEEDED, and an error with no status is the server's fault, INTERNAL. The SDK
maps statuses back in one place, ``vflclient._exceptions``: besides the "SDK:" lines,
UNAUTHENTICATED is PermissionDenied too, CANCELLED is JobAborted too, and a status with no class
here (UNIMPLEMENTED, INTERNAL, ...) is a bare VflError with the status name in its message.

DataError, TlsConfigError, TensorError, InferenceInputError and ProtocolError are also ValueErrors,
ModelNotFound is a LookupError and KeyExistsError a FileExistsError, so ``except`` clauses written
for those still catch them. The modules that used to define a class re-export it, e.g.
``vflcore.wire.tensors.TensorError``, ``vflserver.inference.servable.ModelNotFound`` and
``vflclient.ModelNotFound``.
"""

from __future__ import annotations

import math
from typing import overload


class VflError(Exception):
    """Base of every error this project raises on purpose."""


# ---- local: configuration, input files, certificates, artifacts -------------------------------


class ConfigError(VflError):
    """A config file, flag or data file is wrong; the message names it and says what to do."""


class DataError(VflError, ValueError):
    """A party's table cannot be used; the message names the file and says what to fix."""


class TlsConfigError(VflError, ValueError):
    """A TLS file is missing, unreadable or not PEM; the message names it and says how to fix it."""


class CertsError(VflError):
    """A certificate file is missing, unreadable or in the way; the message says what to do."""


class KeyExistsError(CertsError, FileExistsError):
    """Issuing would overwrite an existing private key and ``force`` was not given."""


class ArtifactError(VflError):
    """The artifact cannot be written or read; the message names the file and the problem."""


class CheckpointError(VflError):
    """A training checkpoint is missing or cannot be read; the message names the file."""


class JobStoreError(VflError):
    """The job store file cannot be used as it is; the message names the file and says what to do."""


class PsiError(VflError):
    """A PSI input is unusable: a point that is not 32 bytes, or a low-order (malicious) point.

    ``index`` is the position of the offending item in the sequence that was being blinded.
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index

    def __reduce__(self) -> tuple[type[PsiError], tuple[str, int | None]]:
        # Raised inside pool workers and re-raised in the parent: keep ``index`` across pickling.
        return (type(self), (str(self), self.index))


class TrainingDiverged(VflError):
    """A loss, an output or a weight became NaN or infinite during training: the job ran away.

    ``what`` says what became non-finite ("the training loss is NaN"); ``epoch`` and ``batch``
    say where, counted from 1 as users count them (None: not known there, or after an epoch's
    evaluation); ``advice`` names the job's settings to change, with their values. The party that
    finds it may not know all three: ``located`` fills in what the training loop knows.

    A passive party that finds its own outputs non-finite reports this error as its failure,
    before sending them; the active party raises it again with the party's words (``message``),
    so the job's message reads the same whoever found it.
    """

    def __init__(
        self,
        what: str,
        *,
        epoch: int | None = None,
        batch: int | None = None,
        advice: str = "",
        message: str | None = None,
    ) -> None:
        self.what, self.epoch, self.batch, self.advice = what, epoch, batch, advice
        #: The message is a party's report, kept as given: nothing is filled in.
        self.reported = message is not None
        super().__init__(message if message is not None else self._words())

    def _words(self) -> str:
        where = ""
        if self.epoch is not None:
            where = f" at epoch {self.epoch}" + (f", batch {self.batch}" if self.batch is not None else "")
        text = f"training diverged{where}: {self.what}"
        return f"{text}; {self.advice}" if self.advice else text

    def located(self, epoch: int | None, batch: int | None, advice: str) -> TrainingDiverged:
        """This error with the position and the advice it lacks filled in (a party's report stays as given)."""
        if self.reported:
            return self
        if self.epoch is not None:
            epoch, batch = self.epoch, self.batch
        return TrainingDiverged(self.what, epoch=epoch, batch=batch, advice=self.advice or advice)


class DivergedServingBest(VflError):
    """Training diverged after a best epoch by validation was pinned: the job serves that epoch instead.

    The passive parties left their step when it ran away, so the job pauses as it does for a lost
    party (``Finish(rejoin)``); they join again at once, and the resumed run trains no more: every
    party loads the best epoch's checkpoint, which is scored, exported and served
    (``[job] validation_fraction``). ``diverged`` is the divergence's own message; ``best`` the
    checkpoint served, in words ("the end of epoch 3").
    """

    def __init__(self, diverged: str, best: str) -> None:
        self.diverged, self.best = diverged, best
        super().__init__(f"{diverged}; the job resumes to serve its best epoch by validation ({best})")


def nonfinite_word(value: float) -> str:
    """ "NaN" or "infinite": what a non-finite number is, in a divergence message."""
    return "NaN" if math.isnan(value) else "infinite"


def check_finite(value: float, what: str, *, epoch: int | None = None) -> None:
    """Raise TrainingDiverged ("``what`` is NaN") if ``value`` is NaN or infinite: a loss that ran away."""
    if not math.isfinite(value):
        raise TrainingDiverged(f"{what} is {nonfinite_word(value)}", epoch=epoch)


# ---- the federation: jobs, parties, tensors ---------------------------------------------------


class PermissionDenied(VflError):
    """The caller's certificate does not allow what it asked for."""


class JoinRejected(VflError):
    """A party's join does not fit the job (a different ID set, or training already started)."""


class PartyUnavailable(VflError):
    """A party needed for this step is offline, or did not answer in time.

    ``PartyUnavailable(3, "it stopped answering")`` reads "party 3 is unavailable: it stopped
    answering" and sets ``party`` and ``reason``. A servable may also raise it with a message of its
    own, ``PartyUnavailable("party 3 is not connected")``; then the message is kept as given and
    ``party`` is None.
    """

    party: int | None
    reason: str

    @overload
    def __init__(self, party: int, reason: str) -> None: ...

    @overload
    def __init__(self, message: str, /) -> None: ...

    def __init__(self, party: int | str, reason: str | None = None) -> None:
        if isinstance(party, str):
            super().__init__(party)
            self.party, self.reason = None, party
        else:
            super().__init__(f"party {party} is unavailable: {reason}")
            self.party, self.reason = party, str(reason)


class PartyLost(PartyUnavailable):
    """A party of a running job is gone: its connection closed, it went silent, or it restarted.

    Unlike a party that reported a failure, a lost party may come back: the service pauses the
    job and resumes it from the newest checkpoint every party holds once it has rejoined.

    ``since`` is when the loss happened (``time.monotonic()``): the moment its connection closed
    or it was last heard from, not the moment the server noticed. ``[server] party_timeout_s``
    counts from it, so a grace period spent noticing is not added to the operator's limit.
    """

    since: float | None

    def __init__(self, party: int, reason: str, *, since: float | None = None) -> None:
        super().__init__(party, reason)
        self.since = since


class Overloaded(VflError):
    """A party has as many calls in flight as it may (``[server] max_party_rpcs``); the message says so."""


class JobAborted(VflError):
    """The job stopped before this call could complete."""


class EmptyIntersection(JobAborted):
    """The parties share no sample ID: there is nothing to train on."""


class TensorError(VflError, ValueError):
    """A tensor from a peer failed validation; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class IncompleteStream(TensorError):
    """A chunk stream ended before its tensor did (or carried none).

    Also what a caller's cancel looks like for a moment: gRPC ends a cancelled call's request
    stream first and marks the call cancelled just after, so the receiver tells the two apart
    (``vflserver.federation.servicer``) before it answers.
    """


# ---- inference --------------------------------------------------------------------------------


class InferenceInputError(VflError, ValueError):
    """The request is wrong (name, shape, datatype, values); the message names the field."""


class ProtocolError(VflError, ValueError):
    """A message does not follow the protocol (sizes, types, counts); the text says what is wrong."""


class ModelNotFound(VflError, LookupError):
    """No model of that name (or that version) is being served."""


# ---- the service: jobs in the job store -----------------------------------------------------


class JobNotFound(VflError):
    """No job of that ID is in the job store; the message names the ID."""


class DuplicateJob(VflError):
    """A job of that ID was already submitted; IDs are never reused, even after a job ends."""


class JobStateError(VflError):
    """The job's current state does not allow the change asked for; the message names both states."""


# ---- the SDK's own: what a failed call's status means to a passive party ---------------------


class ServerUnavailable(VflError):
    """The active party's server cannot be reached, or stopped answering."""


class TensorRejected(VflError):
    """The server refused a tensor this party sent (shape, dtype or values)."""
