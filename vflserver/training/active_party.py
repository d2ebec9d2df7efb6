"""The active party: it owns the labels, drives the job, evaluates, and scores rows by ID.

``ActiveParty.run`` is the whole job as the label holder sees it: wait for every passive party,
train epoch by epoch through the configured algorithm, evaluate on the held-out rows after each
epoch, checkpoint, and finally run federated inference on the held-out rows. The gRPC handlers
never touch this class directly; they talk to its ``PassiveParties``.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import structlog
import torch

from vflalgorithms.base import ActiveContext, ServerAlgorithm, algorithm_spec
from vflalgorithms.factories import resolve_factories
from vflcore.data.checkpoints import (
    discard_after,
    load_position,
    party_dir,
    readable_checkpoints,
    save_position,
)
from vflcore.data.tables import PartyTable, write_aligned_ids
from vflcore.errors import ArtifactError, CheckpointError, ConfigError, JobAborted, PartyLost
from vflcore.job import ACTIVE_PARTY, JobSpec, Position, Schedule, check_job_id, mid_epoch_checkpoint_due
from vflcore.ml.losses import label_tensor, task_loss
from vflcore.ml.metrics import task_metrics
from vflcore.ml.models import seed_dropout
from vflcore.ml.onnx_export import MODEL_FILE, PROBE_ROWS, export_onnx, part_metadata
from vflcore.ml.state import restore_rng, rng_state
from vflcore.runtime.daemon import adopt_torch_threads
from vflcore.wire.names import EVAL_EMBEDDING, infer_embedding_name
from vflcore.wire.traffic import MB
from vflcore.work_items import Checkpoint, Evaluate, Infer, Restore
from vflserver.federation.alignment import AlignmentResult, align_active
from vflserver.federation.passive_parties import PassiveParties
from vflserver.inference.artifact import ArtifactInfo
from vflserver.inference.onnx_model import info_metadata
from vflserver.inference.servable import LABEL, PREDICTION, PROBABILITIES
from vflserver.inference.triton_repository import write_triton_repository
from vflserver.training.importance import write_client_importance

#: The standalone model's file in the active party's run directory.
#: Where the server writes a Triton model repository of every standalone model, in its run folder.
MODEL_REPOSITORY = "model_repository"

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class EpochReport:
    """What one epoch did: its mean training loss and the held-out metrics after it."""

    epoch: int
    train_loss: float
    test_loss: float
    metrics: dict[str, float]
    seconds: float
    wire_mb: float = 0.0  # training traffic of the epoch, both directions, every party

    def plain(self) -> dict[str, Any]:
        """Its fields as Python numbers (no NumPy scalars), as a checkpoint stores them."""
        return {
            **vars(self),
            "train_loss": float(self.train_loss),
            "test_loss": float(self.test_loss),
            "metrics": {name: float(value) for name, value in self.metrics.items()},
        }


@dataclass
class RunSummary:
    """The outcome of a job on the active party."""

    job_id: str
    alignment: AlignmentResult | None = None
    epochs: list[EpochReport] = field(default_factory=list)
    final_metrics: dict[str, float] = field(default_factory=dict)
    run_dir: Path | None = None
    #: Bytes per passive party and phase (``vflcore.wire.traffic.Traffic.report``).
    wire: dict[int, dict[str, dict[str, int]]] = field(default_factory=dict)
    #: ‖W_k‖ per party for the VIM family (``vflserver.training.importance``), else None.
    client_importance: dict[int, float] | None = None
    #: The standalone model (APFed): ``model.onnx``, which serves without any passive party; else None.
    artifact: Path | None = None
    #: The active party's trained part as ONNX (every algorithm; the standalone model for APFed).
    onnx: Path | None = None
    #: The Triton model folder of the standalone model (``model_repository/<job>``), else None.
    model_repository: Path | None = None


class ActiveParty:
    """The label holder's side of one job."""

    def __init__(
        self,
        job: JobSpec,
        table: PartyTable,
        *,
        top_hidden: Sequence[int] = (64,),
        top_dropout: float = 0.0,
        run_dir: Path = Path("runs"),
        step_timeout_s: float = 300.0,
        offline_grace_s: float = 5.0,
        psi_workers: int | None = None,
        psi_only: bool = False,
        keep_checkpoints: int = 2,
        heartbeat_timeout_s: float | None = None,
        factories: Mapping[str, str] | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if keep_checkpoints < 1:
            raise ConfigError(f"keep_checkpoints = {keep_checkpoints}; keep at least the newest checkpoint (1)")
        if table.labels is None and not psi_only:
            raise ConfigError(f"{table.source}: the active party's data needs a label column")
        if not job.job_id:
            job = replace(job, job_id=f"job-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
        try:
            check_job_id(job.job_id)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        spec = algorithm_spec(job.algorithm)  # an unknown algorithm, or a bad option, fails now, not after PSI
        spec.options(job.algorithm_options)
        algorithm = spec.active_half()
        #: The job's own model factories, imported (checked and probed at submission already).
        self.factories = resolve_factories(factories or {}, job.algorithm, algorithm.factory_keys)
        self.device = torch.device(device)
        if algorithm.needs_own_features and not table.features.shape[1] and not psi_only:
            raise ConfigError(
                f"{table.source}: {job.algorithm} needs feature columns on the active party (it predicts from "
                "them alone), but this file has only IDs and labels"
            )
        if table.labels is not None and not psi_only:
            # From the whole label column, not the aligned rows: a class absent from the
            # intersection must still have an output, and every party must agree on the width.
            _, outputs = label_tensor(job.task, torch.from_numpy(np.asarray(table.labels, dtype=np.float64)))
            job = replace(job, num_outputs=outputs)
        self.job = job
        self.own_table = table
        self.top_hidden = tuple(top_hidden)
        self.top_dropout = top_dropout
        self.psi_workers = psi_workers
        self.psi_only = psi_only
        self.keep_checkpoints = keep_checkpoints
        self.parties = PassiveParties(
            self.job,
            step_timeout_s=step_timeout_s,
            offline_grace_s=offline_grace_s,
            heartbeat_timeout_s=heartbeat_timeout_s,
        )
        self.run_dir = party_dir(run_dir, self.job.job_id, ACTIVE_PARTY)
        self.repository_root = run_dir / MODEL_REPOSITORY
        self.stop_event = threading.Event()
        #: Set once every passive party has joined: a failure before it means one never came.
        self.everyone_joined = False
        self._inference_lock = threading.Lock()
        self._loss_fn = task_loss(self.job.task)
        # Set by _prepare once PSI has aligned the rows:
        self.table: PartyTable
        self.schedule: Schedule
        self.labels: torch.Tensor
        self.algorithm: ServerAlgorithm
        self._row_of_id: dict[str, int] = {}
        self._summary = RunSummary(job_id=self.job.job_id)  # the running job's, once run() starts

    def _prepare(self, aligned: PartyTable) -> None:
        """Build the schedule and the algorithm's models once the aligned rows are known."""
        self.job = replace(self.job, num_rows=aligned.num_rows)
        self.parties.job = self.job
        self.table = aligned
        self.schedule = self.job.schedule()
        self._row_of_id = {str(i): n for n, i in enumerate(aligned.ids)}
        if self.psi_only:
            return
        labels, _ = label_tensor(self.job.task, torch.from_numpy(np.asarray(aligned.labels, dtype=np.float64)))
        self.labels = labels
        self.algorithm = algorithm_spec(self.job.algorithm).active_half()(
            ActiveContext(
                job=self.job,
                schedule=self.schedule,
                parties=self.parties,
                features=torch.from_numpy(np.ascontiguousarray(aligned.features, dtype=np.float32)).to(self.device),
                labels=labels.to(self.device),
                num_outputs=self.job.num_outputs,
                top_hidden=self.top_hidden,
                top_dropout=self.top_dropout,
                after_step=self._after_step,
                factories=self.factories,
                device=self.device,
            )
        )

    def align(self) -> AlignmentResult:
        """PSI with every passive party (or its saved result); the rows are then ready to train."""
        result = align_active(self.own_table, self.parties, cache_dir=self.run_dir / "psi", workers=self.psi_workers)
        self._prepare(result.table)
        write_aligned_ids(self.run_dir, result.table.ids)
        log.info(
            "aligned",
            rows=result.table.num_rows,
            reused=result.reused,
            pairwise=result.pairwise,
            seconds=round(result.seconds, 2),
        )
        return result

    # ---- the job ----------------------------------------------------------------------------

    def run(
        self,
        *,
        join_timeout_s: float = 300.0,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_aligned: Callable[[AlignmentResult], None] | None = None,
        keep_serving: bool = False,
        resume: bool = False,
    ) -> RunSummary:
        """Train, evaluate and score the held-out rows; always tell the parties how it ended.

        With ``keep_serving`` the passive parties stay connected after training, so that
        ``predict_ids`` can go on scoring rows until ``shutdown`` is called. With ``resume`` the
        job continues from the newest checkpoint that every party holds (``_roll_back``);
        without it, every party starts afresh and deletes what an earlier run left. A party lost
        on the way raises PartyLost after the others were told to rejoin (``Finish(rejoin)``).
        """
        adopt_torch_threads()  # this may be any thread (the daemon's job thread, a test's)
        summary = self._summary = RunSummary(job_id=self.job.job_id, run_dir=self.run_dir)
        fed = self.parties
        try:
            log.info("waiting_for_parties", parties=list(self.job.passive_parties), timeout_s=join_timeout_s)
            fed.wait_until_ready(join_timeout_s, self.stop_event)
            self.everyone_joined = True
            fed.state = "aligning"
            summary.alignment = self.align()
            if on_aligned is not None:
                on_aligned(summary.alignment)
            if self.psi_only:
                self.shutdown("alignment finished (--psi-only)")
                return summary
            fed.state = "training"
            seed_dropout(self.job)
            first = self._roll_back(resume, summary)
            self._announce_first_step(first, resume)
            for epoch in range(first.epoch, self.job.epochs):
                structlog.contextvars.bind_contextvars(round=epoch)
                if self.stop_event.is_set():
                    raise JobAborted("shutdown requested")
                started = time.perf_counter()
                train_loss = self.algorithm.train_epoch(epoch, first.batch if epoch == first.epoch else 0)
                test_loss, metrics = self.evaluate(epoch)
                wire_mb = fed.traffic.phase_total(f"train {epoch}") / MB
                report = EpochReport(epoch, train_loss, test_loss, metrics, time.perf_counter() - started, wire_mb)
                summary.epochs.append(report)
                self._save(Position.after_epoch(epoch))
                fed.dispatch(functools.partial(Checkpoint, position=Position.after_epoch(epoch)))
                log.info("epoch_done", train_loss=train_loss, test_loss=test_loss, **metrics)
                if on_epoch is not None:
                    on_epoch(report)
            structlog.contextvars.unbind_contextvars("round")
            fed.state = "serving"
            summary.final_metrics = self._final_inference()
            summary.wire = fed.traffic.report()
            summary.client_importance = self.algorithm.client_importance()
            if summary.client_importance is not None:
                title = f"client importance, {self.job.algorithm}, job {self.job.job_id}"
                write_client_importance(self.run_dir, summary.client_importance, title=title)
                log.info(
                    "client_importance", **{f"party_{p}": round(n, 4) for p, n in summary.client_importance.items()}
                )
            self._export(summary)
            self._write_summary(summary)
            if not keep_serving:
                self.shutdown("training finished")
            return summary
        except PartyLost as exc:
            paused = f"the job pauses until it can resume: {exc}"
            fed.finish(False, paused, rejoin=True)
            fed.abort(JobAborted(paused))  # what a party in the middle of a step reads (ABORTED)
            raise
        except BaseException as exc:
            fed.finish(False, f"the active party stopped the job: {exc}")
            fed.abort(exc if isinstance(exc, Exception) else JobAborted("interrupted"))
            raise

    # ---- checkpoints ------------------------------------------------------------------------

    def _save(self, position: Position) -> None:
        """Save this party's state as the checkpoint of ``position``.

        At an epoch's end the passive parties are then told to save theirs (``Checkpoint``), so a
        passive party never holds an epoch the active party lacks. Inside an epoch
        (``[job] checkpoint_every_steps``) every party saves at the same steps by itself. The
        rollback point is the newest position they all hold (``_roll_back``).
        """
        state = {
            "algorithm": self.algorithm.state(),
            "rng": rng_state(),
            "reports": [report.plain() for report in self._summary.epochs],
        }
        save_position(self.run_dir, position, state, keep=self.keep_checkpoints)

    def _after_step(self, epoch: int, done: int, per_epoch: int) -> None:
        if mid_epoch_checkpoint_due(self.job, epoch, done, per_epoch):
            position = Position(epoch, done)
            self._save(position)
            if not self.algorithm.parties_in_step:  # they are idle: tell them, as at an epoch's end
                self.parties.dispatch(functools.partial(Checkpoint, position=position))

    def _roll_back(self, resume: bool, summary: RunSummary) -> Position:
        """Agree on the newest checkpoint every party holds, load it everywhere; returns where training goes on.

        Each passive party said at Join which positions it can read. The active party tries the
        common ones, newest first, and loads its own; then every passive party is told to load
        the same one (``Restore``) and to delete newer ones. With no common checkpoint, or
        without ``resume``, every party starts afresh (``Restore`` of ``Position(0, 0)``), which
        gives the same model.
        """
        fed, end = self.parties, Position(self.job.epochs, 0)
        held = {ACTIVE_PARTY: readable_checkpoints(self.run_dir) if resume else []}
        held |= {party: list(fed.member(party).checkpoints) for party in self.job.passive_parties}
        common = set(held[ACTIVE_PARTY]).intersection(*(set(h) for h in held.values()))
        chosen = Position(0, 0)
        for position in sorted((p for p in common if p <= end), reverse=True):
            try:
                state = load_position(self.run_dir, position)
            except CheckpointError as exc:  # damaged since it was listed: an older one will do
                log.warning("checkpoint_unreadable", position=str(position), error=str(exc))
                continue
            self.algorithm.load_state(state["algorithm"])
            restore_rng(state["rng"])
            summary.epochs = [EpochReport(**report) for report in state["reports"]]
            chosen = position
            break
        discard_after(self.run_dir, chosen)
        fed.dispatch(lambda tid: Restore(tid, chosen))
        if resume:
            log.info(
                "resumed",
                at=str(chosen),
                epoch=chosen.epoch,
                batch=chosen.batch,
                held={str(party): [str(p) for p in found] for party, found in held.items()},
            )
        return chosen

    def _announce_first_step(self, position: Position, resumed: bool) -> None:
        """Log ``first_step`` once the first training step is done: how long a resumption took is seen here."""
        algorithm = self.algorithm

        def first(step: int) -> None:
            algorithm.on_step = None
            log.info("first_step", step=step, epoch=position.epoch, batch=position.batch, resumed=resumed)

        algorithm.on_step = first

    def shutdown(self, message: str) -> None:
        """End the job successfully: every passive party gets Finish and leaves."""
        self.parties.finish(True, message)
        self.parties.state = "finished"

    def evaluate(self, epoch: int) -> tuple[float, dict[str, float]]:
        """Loss and task metrics on the held-out rows, with every party's current model."""
        rows = self.schedule.test_rows
        if len(rows) == 0:
            return float("nan"), {}
        if self.algorithm.needs_parties_to_predict:
            fed = self.parties
            fed.expect(EVAL_EMBEDDING, epoch, 0, (len(rows), self.algorithm.upload_width))
            fed.dispatch(lambda tid: Evaluate(tid, epoch, rows))
            output = self.algorithm.predict(rows, fed.gather(EVAL_EMBEDDING, epoch, 0))
        else:
            output = self.algorithm.predict(rows, {})
        loss = float(self._loss_fn(output, self.labels[rows]))
        return loss, task_metrics(self.job.task, self._label_array(rows), output.numpy())

    # ---- inference --------------------------------------------------------------------------

    def predict_rows(self, rows: np.ndarray, *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference on aligned rows; federated unless the algorithm's model is the active party's alone.

        Every passive party must be online, except those given a stand-in representation in
        ``substitutes`` (one row, broadcast over ``rows``): the degraded TVFL-0 / TVFL-A modes.
        """
        if not self.algorithm.needs_parties_to_predict:
            return self.algorithm.predict(rows, {}).numpy()
        with self._inference_lock:
            return self.algorithm.predict(rows, self._representations(rows, substitutes or {})).numpy()

    def _representations(self, rows: np.ndarray, substitutes: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Each passive party's representation of ``rows``: asked of the online ones, stood in for the rest."""
        request_id = uuid.uuid4().hex[:12]
        name = infer_embedding_name(request_id)
        fed, width = self.parties, self.algorithm.upload_width
        online = set(fed.online_parties())
        asked: list[int] = []
        for party in self.job.passive_parties:
            if party in substitutes and party not in online:
                continue  # stood in for below (the caller warns: it knows the mode)
            fed.check_online(party)  # raises once the party has been gone longer than the grace period
            asked.append(party)
        for party in asked:
            fed.expect(name, 0, 0, (len(rows), width), party=party)
        fed.dispatch(lambda tid: Infer(tid, request_id, rows), parties=asked)
        try:
            found = {party: fed.gather_from(party, name, 0, 0) for party in asked}
        finally:
            fed.forget(name, 0, 0)
        for party in self.job.passive_parties:
            if party not in found:
                found[party] = np.broadcast_to(np.asarray(substitutes[party], dtype=np.float32), (len(rows), width))
        return found

    def representation_means(self) -> dict[int, np.ndarray]:
        """Each passive party's mean representation over the training rows (the TVFL-A stand-in)."""
        rows = self.schedule.train_rows
        with self._inference_lock:
            found = self._representations(rows, {})
        return {party: array.mean(axis=0, dtype=np.float64).astype(np.float32) for party, array in found.items()}

    def predict_ids(self, ids: Sequence[str], *, substitutes: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Inference by sample ID (see ``predict_rows``); KeyError if any ID is not among the aligned rows.

        The error says how many, never which: on the inference endpoint, naming them would tell a
        caller which of its IDs are in the PSI intersection (``docs/security.md``).
        """
        missing = sum(str(i) not in self._row_of_id for i in ids)
        if missing:
            raise KeyError(f"{missing} of the {len(ids)} IDs cannot be served")
        rows = np.asarray([self._row_of_id[str(i)] for i in ids], dtype=np.int64)
        return self.predict_rows(rows, substitutes=substitutes)

    def _final_inference(self) -> dict[str, float]:
        rows = self.schedule.test_rows
        if len(rows) == 0:
            return {}
        ids = [str(self.table.ids[r]) for r in rows]
        output = self.predict_ids(ids)
        metrics = task_metrics(self.job.task, self._label_array(rows), output)
        self._write_predictions(ids, rows, output)
        log.info("federated_inference_done", rows=len(rows), **metrics)
        return metrics

    def _export(self, summary: RunSummary) -> None:
        """Write the trained part as ``model.onnx``; a standalone model also goes into a Triton repository.

        The graph answers what the inference endpoint answers (probabilities and label, or the
        prediction), so the standalone model serves unchanged from onnxruntime or Triton. A model
        the exporter cannot translate faithfully is logged (``model_export_failed``) and the job
        still finishes; a standalone model is then not served (``summary.artifact`` stays None).
        """
        info = ArtifactInfo(
            model_name=self.job.job_id,
            job_id=self.job.job_id,
            algorithm=self.job.algorithm,
            task=self.job.task,
            feature_names=tuple(self.table.feature_names),
            num_outputs=self.job.num_outputs,
        )
        standalone = not self.algorithm.needs_parties_to_predict
        names = (PROBABILITIES, LABEL) if self.job.task == "classification" else (PREDICTION,)
        part = self.algorithm.onnx_part(self.schedule.train_rows[:PROBE_ROWS], _served_outputs(self.job.task), names)
        metadata = info_metadata(info) if standalone else part_metadata(self.job, ACTIVE_PARTY)
        path = self.run_dir / MODEL_FILE
        try:
            worst = export_onnx(replace(part, metadata=metadata), path)
        except (ArtifactError, OSError) as exc:  # training succeeded and the checkpoints hold the weights
            log.error("model_export_failed", path=str(path), error=str(exc))
            return
        summary.onnx = path
        log.info("model_exported", path=str(path), inputs=list(part.inputs), max_difference=worst)
        if standalone:
            summary.artifact = path
            try:
                summary.model_repository = write_triton_repository(path, self.repository_root, self.job.job_id)
            except (ArtifactError, OSError) as exc:  # a job id Triton cannot take, a full disk: model.onnx serves
                log.error("model_repository_skipped", error=str(exc))
                return
            log.info("model_repository_written", path=str(summary.model_repository))

    def _label_array(self, rows: np.ndarray) -> np.ndarray:
        return self.labels[rows].numpy().reshape(len(rows), -1).squeeze(-1)

    # ---- reports ----------------------------------------------------------------------------

    def _write_predictions(self, ids: list[str], rows: np.ndarray, output: np.ndarray) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        labels = self._label_array(rows)
        predicted = output.argmax(axis=1) if self.job.task == "classification" else output.reshape(-1)
        with (self.run_dir / "test_predictions.csv").open("w") as fh:
            fh.write("id,label,prediction\n")
            for i, y, p in zip(ids, labels, predicted, strict=True):
                fh.write(f"{i},{y},{p}\n")

    def _write_summary(self, summary: RunSummary) -> None:
        alignment = summary.alignment
        payload: dict[str, Any] = {
            "job_id": summary.job_id,
            "algorithm": self.job.algorithm,
            "aligned_rows": self.job.num_rows,
            "psi": None if alignment is None else {"reused": alignment.reused, "pairwise": alignment.pairwise},
            "epochs": [vars(e) for e in summary.epochs],
            "step_losses": list(self.algorithm.step_losses),
            "final_metrics": summary.final_metrics,
            "wire_bytes": {str(party): phases for party, phases in summary.wire.items()},
            "artifact": None if summary.artifact is None else str(summary.artifact),
            "onnx": None if summary.onnx is None else str(summary.onnx),
            "model_repository": None if summary.model_repository is None else str(summary.model_repository),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(payload, indent=2))


def _served_outputs(task: str) -> Callable[[torch.Tensor], tuple[torch.Tensor, ...]]:
    """The raw output as the endpoint's outputs: (probabilities, label), or (prediction,) for regression."""
    if task == "classification":
        return lambda logits: (torch.softmax(logits, dim=1), torch.argmax(logits, dim=1))
    return lambda values: (values,)
