"""A passive party taking part in a job: join, then do what the server's tasks say until Finish.

This is the heart of the public SDK. ``vfl-client`` is a thin program around it, so anything the
daemon can do, a user's own Python code can do too::

    from pathlib import Path
    from vflclient import Connection, PassiveParty, TlsFiles, read_party_csv
    table = read_party_csv(Path("party2.csv"))
    with Connection("server.example.org:50051", party=2, tls=TlsFiles(...)) as conn:
        result = PassiveParty(2, table).run(conn)
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import structlog
import torch

from vflalgorithms.contexts import ModelFactory, PassiveContext
from vflalgorithms.halves import ClientAlgorithm
from vflalgorithms.registry import algorithm_spec, algorithms
from vflclient._alignment import align_passive
from vflclient._connection import Connection
from vflclient._divergence import CheckedLink, check_upload, checked_state
from vflcore.data.checkpoints import (
    discard_after,
    load_position,
    party_dir,
    pin,
    readable_checkpoints,
    save_position,
)
from vflcore.data.tables import PartyTable, write_aligned_ids
from vflcore.errors import ArtifactError, ConfigError, JobAborted, JoinRejected, PartyUnavailable, ServerUnavailable
from vflcore.job.rules import validate_job
from vflcore.job.schedule import Position, Schedule, mid_epoch_checkpoint_due, round_score_due
from vflcore.job.spec import ACTIVE_PARTY, JobSpec, check_job_id
from vflcore.ml.modes import modes_kept
from vflcore.ml.onnx_export import MODEL_FILE, PROBE_ROWS, export_onnx, part_metadata
from vflcore.ml.state import restore_rng, rng_state
from vflcore.party_privacy import PartyPrivacy, refusal
from vflcore.psi.cache import cached_keys
from vflcore.psi.progress import discard_all, resumable_keys
from vflcore.runtime.config import ClientSettings
from vflcore.runtime.daemon import adopt_torch_threads
from vflcore.wire.links import TrainingLink
from vflcore.wire.names import EVAL_EMBEDDING, infer_embedding_name
from vflcore.wire.tensors import TensorKey
from vflcore.wire.traffic import summary_lines
from vflcore.work_items import Align, Checkpoint, Evaluate, Finish, HoldOut, Infer, Restore, Share, Task, TrainEpoch
from vflprivacy.embedding_noise import NoisyLink, protected_link
from vflprivacy.recording import LinkRecorder, RecordingLink

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RunResult:
    """How a job ended for this party."""

    job_id: str
    success: bool
    message: str
    epochs_trained: int
    run_dir: Path
    #: The job only paused (a party was lost): ask NextJob and join it again to resume it.
    rejoin: bool = False


class PassiveParty:
    """One feature holder: its table, its own model, and its checkpoints.

    ``settings`` are this party's own (``vflcore.runtime.config.ClientSettings``: its config's
    ``[client]``, ``[psi]`` and ``[compute]``), as ``ActiveParty`` takes the server's; the defaults
    when None. ``model_factory`` builds its bottom model (None: the built-in one). ``privacy`` is what
    it requires of every job (its config's ``[privacy]``). ``recorder`` keeps what crosses its link,
    for the attack probes.
    """

    def __init__(
        self,
        party: int,
        table: PartyTable,
        settings: ClientSettings | None = None,
        *,
        model_factory: ModelFactory | None = None,
        privacy: PartyPrivacy | None = None,
        recorder: LinkRecorder | None = None,
    ) -> None:
        self.party = party
        self.own_table = table
        self.table: PartyTable | None = None  # the aligned rows, once PSI is done
        #: This party's settings (``[client]``, ``[psi]``, ``[compute]``): where its checkpoints go and how
        #: many it keeps, its heartbeat, and where it computes; checked when they were made.
        self.settings = settings or ClientSettings()
        self.model_factory = model_factory
        self.device = torch.device(self.settings.device)
        self.stop_event = threading.Event()
        self.job: JobSpec | None = None
        #: The job's split of the aligned rows and its batches: from the seed, or around the rows the
        #: active party holds out (``HoldOut``); set at alignment.
        self.schedule: Schedule | None = None
        self.algorithm: ClientAlgorithm | None = None
        #: Keeps what crosses the training link, for the attack probes (``vflprivacy.recording``); off by default.
        self.recorder = recorder
        #: What this party requires of a job's ``[privacy]`` (its config's ``[privacy]``); a job below it is refused.
        self.privacy = privacy or PartyPrivacy()
        #: What the algorithm, evaluation and inference send through: the connection, behind the job's embedding
        #: protection if it asks for one (``vflprivacy.embedding_noise``); set with the algorithm.
        self.link: TrainingLink | None = None
        #: Set once this party saved the job's checkpoint after its last epoch: its training is over,
        #: whatever follows (evaluation, serving the model until the next job or a stop).
        self.trained = False

    def run(self, connection: Connection, job_id: str = "") -> RunResult:
        """Join the job (``job_id`` as ``Connection.next_job`` offered it, or the waiting one) and work
        through its tasks; returns when the server says Finish."""
        adopt_torch_threads()  # the SDK may run a party on any thread
        _own_folder_name(job_id)
        with connection.closing_is_stopping():
            return self._join_and_work(connection, job_id)

    def _join_and_work(self, connection: Connection, job_id: str) -> RunResult:
        held = readable_checkpoints(party_dir(self.settings.run_dir, job_id, self.party)) if job_id else []
        job = connection.join(
            self.own_table,
            self._saved_alignments(),
            job_id=job_id,
            checkpoints=held,
            resumable_psi=resumable_keys(self.settings.run_dir.glob(f"*/party-{self.party}/psi")),
        )
        _own_folder_name(job.job_id)
        _meets_the_rules(job)
        _passive_half(job.algorithm)  # refuse an algorithm this client lacks before any work
        self._refuse_weaker_privacy(connection, job)
        self.job = job
        structlog.contextvars.bind_contextvars(job=job.job_id)
        log.info("joined", algorithm=job.algorithm, ids=self.own_table.num_rows, epochs=job.epochs)
        heartbeats = connection.start_heartbeats(job.job_id, self.settings.heartbeat_s)
        try:
            return self._work(connection, job)
        finally:
            heartbeats.set()

    def _refuse_weaker_privacy(self, connection: Connection, job: JobSpec) -> None:
        """Refuse a job that protects this party's embeddings less than its own config requires.

        Reported to the server too, which then fails the job before PSI with this party's reason.
        """
        reason = refusal(self.privacy, job.privacy, self.party)
        if reason is not None:
            log.error("job_refused", job=job.job_id, reason=reason)
            connection.report_failure(job.job_id, 0, reason)
            raise JoinRejected(reason)

    def _work(self, connection: Connection, job: JobSpec) -> RunResult:
        epochs_trained = 0
        for task in connection.tasks(job.job_id):
            if self.stop_event.is_set():
                break
            if isinstance(task, Finish):
                log.info("job_finished", success=task.success, message=task.message, rejoin=task.rejoin)
                if isinstance(self.link, NoisyLink):
                    self.link.report(job.privacy.dp_delta)  # ε of what left this party, logged and in privacy.json
                self._write_traffic(connection, job)
                if not task.rejoin:  # over for good: an interrupted PSI will not resume, its secrets go
                    discard_all(self._dir(job) / "psi")
                return RunResult(job.job_id, task.success, task.message, epochs_trained, self._dir(job), task.rejoin)
            try:
                epochs_trained += self._perform(task, connection)
            except (JobAborted, PartyUnavailable, ServerUnavailable):
                raise  # the server ended the task, or cannot be reached: nothing to report
            except Exception as exc:
                if connection.closed:  # the daemon is stopping (a signal) and closed it under the task
                    raise ServerUnavailable("the connection was closed: this party is stopping") from exc
                connection.report_failure(job.job_id, task.task_id, f"{type(exc).__name__}: {exc}")
                raise
        return RunResult(job.job_id, False, "stopped before the job finished", epochs_trained, self._dir(job))

    def _write_traffic(self, connection: Connection, job: JobSpec) -> None:
        """This party's own count of the bytes it exchanged, per phase, next to its checkpoints."""
        report = connection.traffic.report().get(ACTIVE_PARTY, {})
        folder = self._dir(job)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "wire_bytes.json").write_text(json.dumps(report, indent=2))
        for line in summary_lines({ACTIVE_PARTY: report}, own=f"party {self.party}"):
            log.info("wire", summary=line)

    def _saved_alignments(self) -> list[bytes]:
        """Keys of the PSI results this party saved in earlier runs, for any job."""
        return [
            key for folder in self.settings.run_dir.glob(f"*/party-{self.party}/psi") for key in cached_keys(folder)
        ]

    def _align(self, task: Align, connection: Connection) -> None:
        """Align this party's rows with the others; the algorithm is built on them at its first task."""
        assert self.job is not None
        started = time.perf_counter()
        aligned = align_passive(
            self.own_table,
            self.job.job_id,
            task,
            connection,  # PSI names travel on the PSI calls (vflcore.wire.names)
            cache_dir=self._dir(self.job) / "psi",
            workers=self.settings.psi_workers,
            engine=self.settings.compute_engine,
            abandon=connection.closing,  # SIGTERM: leave at once, not after the chunks in progress
        )
        self.table = aligned
        self.job = replace(self.job, num_rows=aligned.num_rows)
        self.schedule = self.job.schedule()
        write_aligned_ids(self._dir(self.job), aligned.ids)
        log.info(
            "aligned", rows=aligned.num_rows, reused=not task.run_psi, seconds=round(time.perf_counter() - started, 2)
        )
        if aligned.features.shape[1]:
            # Build now, not at the first epoch: the first optimizer of a process imports parts of
            # torch for seconds, which would otherwise stall the first training step.
            self._algorithm(connection)

    def _algorithm(self, connection: Connection) -> ClientAlgorithm:
        """The algorithm on the aligned rows, built at the first task that needs it.

        Not at alignment: a ``--psi-only`` job ends after PSI, and a party whose CSV holds only
        its ID column (no features, so no bottom model can be built) must still finish it.
        """
        assert self.job is not None and self.table is not None and self.schedule is not None, (
            "the server sent work before alignment"
        )
        if self.algorithm is None:
            recorded = connection if self.recorder is None else RecordingLink(connection, self.recorder)
            self.link = protected_link(recorded, self.job.privacy, self._dir(self.job), self.party)
            self.algorithm = _passive_half(self.job.algorithm)(
                PassiveContext(
                    party=self.party,
                    job=self.job,
                    schedule=self.schedule,
                    features=torch.from_numpy(np.ascontiguousarray(self.table.features, dtype=np.float32)).to(
                        self.device
                    ),
                    link=CheckedLink(self.link, self.party, self.job),  # NaN never leaves: divergence is reported
                    model_factory=self.model_factory,
                    after_step=self._after_step,
                    device=self.device,
                )
            )
        return self.algorithm

    def _perform(self, task: Task, connection: Connection) -> int:
        """Do one task; returns 1 for a finished training epoch, else 0."""
        if isinstance(task, Align):
            self._align(task, connection)
            return 0
        if isinstance(task, HoldOut):
            self._hold_out(task.rows)
            return 0
        algorithm = self._algorithm(connection)
        assert self.job is not None and self.link is not None
        job, link = self.job, self.link
        match task:
            case TrainEpoch(_, epoch, first_batch):
                structlog.contextvars.bind_contextvars(round=epoch)
                algorithm.train_epoch(epoch, first_batch)
                log.info("epoch_done")
                return 1
            case Checkpoint(_, position, best):
                state = checked_state(self.party, job, position, self._state(algorithm))
                if best is not None:  # the best epoch by validation so far: kept beyond keep_checkpoints
                    pin(self._dir(job), best)
                save_position(self._dir(job), position, state, keep=self.settings.keep_checkpoints)
                # Training is over: the model leaves (with validation, the best epoch's, at Restore(serve)).
                if position == Position.after_epoch(job.epochs - 1) and not job.serves_best_epoch:
                    self._trained(algorithm, job)
            case Restore(_, position, serve):
                self._restore(algorithm, position, keep_newer=serve)
                if serve:
                    self._trained(algorithm, job)
            case Evaluate(_, epoch, rows):
                self._send_embedding(epoch, 0, rows)
            case Share(_, round_, name):
                link.send(TensorKey(job.job_id, round_, 0, name), algorithm.share(name))
            case Infer(_, request_id, rows):
                link.send(TensorKey(job.job_id, 0, 0, infer_embedding_name(request_id)), algorithm.embed(rows))
                log.info("inference_served", request=request_id, rows=len(rows))
        return 0

    def _trained(self, algorithm: ClientAlgorithm, job: JobSpec) -> None:
        """Training is over, and ``algorithm`` holds the model to serve: export it (and record it for the probes)."""
        self.trained = True
        self._export(algorithm, job)
        if self.recorder is not None:
            self.recorder.record_trained(algorithm.embed, job.num_rows)

    def _hold_out(self, rows: np.ndarray) -> None:
        """The active party's own test rows (its dataset's ``held_out_ids``): the split is built around them."""
        assert self.job is not None, "the server sent held-out rows before alignment"
        try:
            self.schedule = self.job.schedule(rows)
        except ValueError as exc:
            raise ConfigError(
                f"the server's held-out rows do not fit this party's {self.job.num_rows} rows: {exc}"
            ) from None
        if self.algorithm is not None:  # built at alignment, before any training step
            self.algorithm.ctx.schedule = self.schedule
        log.info("held_out", test_rows=len(self.schedule.test_rows))

    def _export(self, algorithm: ClientAlgorithm, job: JobSpec) -> None:
        """Write this party's trained part as ``model.onnx`` next to its checkpoints (it never leaves this host).

        A model the exporter cannot translate faithfully is logged, not fatal: training succeeded,
        and the checkpoints hold the weights.
        """
        assert self.table is not None
        assert self.schedule is not None
        rows = self.schedule.train_rows[:PROBE_ROWS]
        part = algorithm.onnx_part(rows)
        path = self._dir(job) / MODEL_FILE
        try:
            worst = export_onnx(replace(part, metadata=part_metadata(job, self.party)), path)
        except (ArtifactError, OSError) as exc:
            log.error("model_export_failed", path=str(path), error=str(exc))
            return
        log.info("model_exported", path=str(path), max_difference=worst)

    @staticmethod
    def _state(algorithm: ClientAlgorithm) -> dict[str, object]:
        return {"algorithm": algorithm.state(), "rng": rng_state()}

    def _after_step(self, epoch: int, done: int, per_epoch: int) -> None:
        """Inside an epoch, after the same steps as every other party: send the test rows' representation
        (``[job] eval_every_rounds``), and save (``[job] checkpoint_every_steps``)."""
        assert self.job is not None and self.algorithm is not None and self.schedule is not None
        if round_score_due(self.job, epoch, done, per_epoch) and _scored_with_parties(self.job.algorithm):
            with modes_kept(self.algorithm):  # training goes on: the models' modes are put back
                self._send_embedding(epoch, done, self.schedule.test_rows)
        if mid_epoch_checkpoint_due(self.job, epoch, done, per_epoch):
            position = Position(epoch, done)
            state = checked_state(self.party, self.job, position, self._state(self.algorithm))
            save_position(self._dir(self.job), position, state, keep=self.settings.keep_checkpoints)

    def _send_embedding(self, epoch: int, done: int, rows: np.ndarray) -> None:
        """This party's representation of ``rows`` for the active party to score: after ``epoch`` (``done`` 0,
        an Evaluate task) or after ``done`` steps inside it (``eval_every_rounds``). Never NaN (``check_upload``)."""
        assert self.job is not None and self.algorithm is not None and self.link is not None
        embedding = self.algorithm.embed(rows)
        check_upload(self.party, self.job, EVAL_EMBEDDING, epoch, done, embedding)
        self.link.send(TensorKey(self.job.job_id, epoch, done, EVAL_EMBEDDING), embedding)

    def _restore(self, algorithm: ClientAlgorithm, position: Position, *, keep_newer: bool = False) -> None:
        """Continue from the checkpoint of ``position`` (``Position(0, 0)``: the start) and delete newer ones
        (``keep_newer``: keep them, as for the best epoch served after training)."""
        assert self.job is not None
        folder = self._dir(self.job)
        if position > Position(0, 0):
            state = load_position(folder, position)  # CheckpointError names the file; reported, the job fails
            algorithm.load_state(state["algorithm"])
            restore_rng(state["rng"])
            log.info("resumed", at=str(position), epoch=position.epoch, batch=position.batch)
        if not keep_newer:
            discard_after(folder, position)

    def _dir(self, job: JobSpec) -> Path:
        return party_dir(self.settings.run_dir, job.job_id, self.party)


def _own_folder_name(job_id: str) -> None:
    """Refuse a job id from the server that is not a plain name: it becomes this party's folder."""
    if not job_id:
        return
    try:
        check_job_id(job_id)
    except ValueError as exc:
        raise JoinRejected(f"the server's {exc}; this party keeps each job in a folder of that name") from None


def _meets_the_rules(job: JobSpec) -> None:
    """Refuse a job no party can run, by the rules the server checks at submission (``validate_job``).

    The same function, so a server that skipped them (an older one, or one built in code) is
    refused in the same words, before this party does any work for the job.
    """
    try:
        validate_job(job, "the server's job")
    except ConfigError as exc:
        raise JoinRejected(f"{exc}; this party refuses the job") from None


def _scored_with_parties(algorithm: str) -> bool:
    """Whether the active party needs this party's representation to score ``algorithm``'s model (not APFed's)."""
    return algorithm_spec(algorithm).active_half().needs_parties_to_predict


def _passive_half(algorithm: str) -> type[ClientAlgorithm]:
    """This client's half of ``algorithm``; a server asking for one it lacks is refused clearly."""
    try:
        return algorithm_spec(algorithm).passive_half()
    except ConfigError:
        raise JoinRejected(
            f"the server's job uses algorithm {algorithm!r}, which this client does not have "
            f"(it has {sorted(algorithms())}); upgrade vfl-client"
        ) from None
