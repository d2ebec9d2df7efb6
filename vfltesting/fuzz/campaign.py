"""Fuzz a live service while an honest job trains on it; every answer is judged as it comes back.

``run_campaign`` starts ``vfl-server`` (with its inference endpoint) and two ``vfl-client``
daemons as processes, trains a reference job, then trains the same job again ("the honest job")
while Hypothesis sends random and mutated messages at every RPC under four identities:

- **party 4**, a certified party that is not in the job, at every federation RPC;
- **party 3**, a member of the job, at the RPCs it can call without speaking for the honest
  daemon: uploads (whose keys of the honest job are moved to rounds it never waits for, so no
  mutant can be an upload it accepts), Heartbeat and Subscribe. A member that sends NextJob or
  ReportFailure, or takes its own gradients, pauses or fails its own job by design: the
  recovery tests cover that;
- **operator** "alice" at every Control RPC (never naming the two jobs above);
- **caller** "fuzz-caller" at every inference RPC and at REST, against the served reference model.

A case fails if the service answers UNKNOWN or INTERNAL, HTTP 500, a refusal with no message, or
an INVALID_ARGUMENT whose message names no field; if a daemon dies; or if the honest job's
per-step losses differ from the reference job's by more than 1e-6 at the end.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
from google.protobuf import text_format
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from vflclient import InferenceClient, JobClient
from vflcore.errors import VflError
from vflcore.proto import federation_pb2 as pb
from vflcore.security.tls import TlsFiles, channel_credentials
from vflcore.wire import serde as wire
from vflcore.wire.tensors import TensorKey
from vfltesting.fuzz import strategies as fz
from vfltesting.pki import Pki
from vfltesting.recovery import job_outcome, loss_difference
from vfltesting.rpc import CONTROL, FEDERATION, INFERENCE, Rpc
from vfltesting.service import ServiceRun, job_document

#: Statuses a refusal may carry; UNKNOWN and INTERNAL never.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.ABORTED,
}
#: RPCs that may hold a call open (long polls and streams): our own short deadline ends them.
LONG_LIVED = {"NextJob", "Subscribe", "Watch", "ReturnGradients", "PushADMMState", "PsiDownload"}
CALL_TIMEOUT_S = 1.0
#: Keys of the honest job that a member's mutants carry are moved to rounds from here on.
NEVER_ROUND = 1_000_000
REFERENCE, HONEST = "fuzz-reference", "fuzz-honest"
CALLER = "fuzz-caller"
TOLERANCE = 1e-6
LIVE_STATES = ("queued", "aligning", "training", "waiting")
#: A message "names a field" when it starts with one ("shape: ...") or mentions one.
_FIELD_PREFIX = re.compile(r"^[\w.\[\]' -]{1,80}:")
_DOMAIN_WORDS = ("input", "output", "job document", "request body", "key", "dataset")
#: A config table or key, as job documents name them: "[job] epochs", "[datasets]".
_CONFIG_KEY = re.compile(r"\[\w+\]")


@dataclass
class Verdict:
    """What one case got back, and whether that is acceptable."""

    status: str
    failure: str | None = None


@dataclass
class Target:
    """One RPC (or the REST endpoint) under one identity, with what to send it."""

    label: str
    cases: st.SearchStrategy[Any]
    send: Callable[[Any], Verdict]


@dataclass
class Report:
    """Cases and statuses per target, the failures, and the honest job's outcome."""

    cases: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    loss_difference: float = float("nan")
    honest_running_at_end: bool = False
    crashed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.cases.values())

    def record(self, target: Target, verdict: Verdict, case: Any) -> None:
        self.cases[target.label] += 1
        self.statuses.setdefault(target.label, Counter())[verdict.status] += 1
        if verdict.failure is not None and len(self.failures) < 200:
            self.failures.append(f"{target.label}: {verdict.failure}; case {_short(case)}")

    def lines(self) -> list[str]:
        out = [f"{'target':<46} {'cases':>6}  statuses"]
        for label, count in self.cases.items():
            statuses = ", ".join(f"{s} {n}" for s, n in self.statuses[label].most_common())
            out.append(f"{label:<46} {count:>6}  {statuses}")
        return out


def _short(case: Any, limit: int = 300) -> str:
    parts = case if isinstance(case, list) else [case]
    text = " | ".join(
        text_format.MessageToString(p, as_one_line=True) if isinstance(p, Message) else repr(p) for p in parts
    )
    return text if len(text) <= limit else text[:limit] + "..."


# ---- judging answers ---------------------------------------------------------------------------------


def _field_names(descriptor: Descriptor, seen: set[str] | None = None) -> set[str]:
    found = seen if seen is not None else set()
    for item in descriptor.fields:
        if item.name not in found:
            found.add(item.name)
            if item.message_type is not None:
                _field_names(item.message_type, found)
    return found


def _judge_grpc(rpc: Rpc, call: Callable[[], object]) -> Verdict:
    try:
        call()
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and rpc.name in LONG_LIVED:
            return Verdict("held open")
        if code not in REFUSALS:
            return Verdict(code.name, f"{code.name}: {details}")
        if not details.strip():
            return Verdict(code.name, f"{code.name} with no message")
        if code == grpc.StatusCode.INVALID_ARGUMENT and not _names_a_field(details, rpc):
            return Verdict(code.name, f"INVALID_ARGUMENT names no field: {details}")
        return Verdict(code.name)
    return Verdict("OK")


def _names_a_field(details: str, rpc: Rpc) -> bool:
    if _FIELD_PREFIX.match(details):
        return True
    names = _field_names(rpc.request.DESCRIPTOR)
    if _CONFIG_KEY.search(details):
        return True
    return any(name in details for name in names) or any(word in details for word in _DOMAIN_WORDS)


# ---- the targets --------------------------------------------------------------------------------------


class Campaign:
    """The targets of one live service, their channels, and the loop that drives Hypothesis over them."""

    def __init__(self, address: str, inference: tuple[int, int], pki: Pki, model: str, width: int) -> None:
        self.address, self.pki, self.model, self.width = address, pki, model, width
        self.grpc_inference, self.rest_port = inference
        self._channels: list[grpc.Channel] = []
        self._rest: http.client.HTTPSConnection | None = None
        self._rest_context = _context(pki.caller_files(CALLER))

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        if self._rest is not None:
            self._rest.close()

    def _channel(self, files: TlsFiles, port_address: str | None = None) -> grpc.Channel:
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        channel = grpc.secure_channel(port_address or self.address, channel_credentials(files), options=options)
        self._channels.append(channel)
        return channel

    def targets(self) -> list[Target]:
        jobs = [REFERENCE, HONEST, "", "other-job"]
        outsider = self._channel(self.pki.party_files(4))
        member = self._channel(self.pki.party_files(3))
        operator = self._channel(self.pki.operator_files("alice"))
        caller = self._channel(self.pki.caller_files(CALLER), f"127.0.0.1:{self.grpc_inference}")
        found: list[Target] = []
        for rpc in FEDERATION:
            found.append(self._grpc_target(rpc, outsider, "party 4", self._federation_cases(rpc, jobs, _as_is)))
        for rpc in FEDERATION:
            if rpc.client_streaming or rpc.name in ("Heartbeat", "Subscribe"):
                found.append(
                    self._grpc_target(rpc, member, "party 3", self._federation_cases(rpc, jobs, _never_awaited))
                )
        valid = job_document("fuzz-valid", "apfed_c", passive_parties=[2, 3])
        for rpc in CONTROL:
            cases: st.SearchStrategy[Any] = fz.messages(rpc.request).map(_spare_jobs)
            if rpc.name == "Submit":
                cases = cases | fz.job_document_mutants(valid).map(_submit_request)
            found.append(self._grpc_target(rpc, operator, "operator", cases.map(lambda m: [m])))
        for rpc in INFERENCE:
            cases = fz.messages(rpc.request)
            if rpc.name == "ModelInfer":
                cases = cases | fz.infer_mutants(self.model, "features", self.width)
            found.append(self._grpc_target(rpc, caller, "caller", cases.map(lambda m: [m])))
        found.append(Target("REST as caller", fz.rest_mutants(self.model, "features", self.width), self._rest_send))
        return found

    @staticmethod
    def _federation_cases(
        rpc: Rpc, jobs: list[str], safe: Callable[[TensorKey], TensorKey]
    ) -> st.SearchStrategy[list[Message]]:
        if rpc.client_streaming:
            mutated = fz.chunk_mutants(jobs, safe)
            randoms = st.lists(fz.messages(rpc.request), min_size=1, max_size=3).map(
                lambda ms: [_safe_chunk(m, safe) for m in ms]
            )
            return mutated | randoms
        if rpc.request.DESCRIPTOR.name == "TensorRequest":
            return (fz.request_mutants(jobs, safe) | fz.messages(rpc.request)).map(lambda m: [m])
        return fz.messages(rpc.request).map(lambda m: [m])

    def _grpc_target(
        self, rpc: Rpc, channel: grpc.Channel, who: str, cases: st.SearchStrategy[list[Message]]
    ) -> Target:
        def send(requests: list[Message]) -> Verdict:
            return _judge_grpc(rpc, lambda: rpc.call(channel, requests, timeout=CALL_TIMEOUT_S))

        return Target(f"{rpc} as {who}", cases, send)

    def _rest_send(self, case: tuple[str, str, bytes, dict[str, str]]) -> Verdict:
        method, path, body, headers = case
        path = "/".join(quote(part, safe="") for part in path.split("/"))
        for attempt in (1, 2):
            if self._rest is None:
                self._rest = http.client.HTTPSConnection(
                    "127.0.0.1", self.rest_port, context=self._rest_context, timeout=10
                )
            try:
                self._rest.request(method, path, body or None, headers)
                response = self._rest.getresponse()
                payload = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                self._rest.close()
                self._rest = None
                if attempt == 2:
                    return Verdict("connection failed", f"the REST endpoint dropped the request: {exc!r}")
        if response.getheader("Connection", "").lower() == "close" and self._rest is not None:
            self._rest.close()
            self._rest = None
        status = str(response.status)
        if response.status >= 500 and response.status != 503:
            return Verdict(status, f"HTTP {status}: {payload[:200]!r}")
        if response.status >= 400:
            try:
                message = json.loads(payload)["error"]
            except (ValueError, KeyError, TypeError):
                return Verdict(status, f"HTTP {status} without a JSON error: {payload[:200]!r}")
            if not isinstance(message, str) or not message.strip():
                return Verdict(status, f"HTTP {status} with an empty error")
        return Verdict(status)

    def run(self, cases: int, seed: int, report: Report, alive: Callable[[], dict[str, bool]]) -> None:
        """At least ``cases`` cases, spread evenly over the targets; stops early if a daemon dies.

        A target whose messages are few (an empty request) runs out of new cases early; the
        others take up what it left, in further rounds with a new seed.
        """
        active, round_ = self.targets(), 0
        while report.total < cases and active:
            share = -(-(cases - report.total) // len(active))
            more = []
            for target in active:
                before = report.cases[target.label]
                _drive(target, share, seed + round_, report)
                if report.cases[target.label] - before >= share:
                    more.append(target)  # it may have new cases yet
                dead = [name for name, up in alive().items() if not up]
                if dead:
                    report.crashed = dead
                    return
            active, round_ = more, round_ + 1


def _drive(target: Target, examples: int, seed: int, report: Report) -> None:
    """Let Hypothesis draw ``examples`` cases for ``target``; every answer is recorded, none raises."""

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(target.cases)
    def case(value: Any) -> None:
        report.record(target, target.send(value), value)

    case()


def _as_is(key: TensorKey) -> TensorKey:
    return key


def _never_awaited(key: TensorKey) -> TensorKey:
    """A key of the honest job moved to a round it never waits for; any other key unchanged."""
    if key.job_id not in (HONEST, REFERENCE):
        return key
    return TensorKey(key.job_id, NEVER_ROUND + key.round % 1000, key.batch, key.name)  # uint32 on the wire


def _safe_chunk(message: Message, safe: Callable[[TensorKey], TensorKey]) -> Message:
    """A random TensorChunk whose key goes through ``safe`` like a mutant's."""
    key = message.key
    key.CopyFrom(wire.key_to_proto(safe(wire.key_from_proto(key))))
    return message


def _submit_request(text: str) -> Message:
    return pb.SubmitRequest(job_document=text)


def _spare_jobs(message: Message) -> Message:
    """Control requests never name the reference or the honest job (cancelling them is allowed, not a bug)."""
    if getattr(message, "job_id", None) in (REFERENCE, HONEST):
        message.job_id = "fuzz-" + message.job_id
    return message


def _context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(files.cert), str(files.key))
    return context


# ---- the whole campaign ---------------------------------------------------------------------------------


def run_campaign(
    root: Path, pki: Pki, data: Path, *, cases: int, seed: int = 0, epochs: int = 5, log: Callable[[str], None] = print
) -> Report:
    """Start the service, train the reference job, fuzz while the honest job trains; the report."""
    report = Report()
    run = ServiceRun(root, pki, data, serving=True)
    root.mkdir(parents=True, exist_ok=True)
    run.start_server()
    run.start_clients()
    try:
        with JobClient(run.address, tls=pki.operator_files("alice")) as jobs:
            document = job_document(REFERENCE, "apfed_c", epochs=epochs, batch_size=8)  # small batches: a long job
            started = time.monotonic()
            jobs.submit(document)
            _finish(jobs, REFERENCE)
            log(
                f"reference job {REFERENCE!r}: {epochs} epochs in {time.monotonic() - started:.1f} s; "
                f"the honest job {HONEST!r} starts, and the fuzzing with it"
            )
            document["job"]["job_id"] = HONEST
            jobs.submit(document)
            _wait(lambda: jobs.get(HONEST).state == "training", "the honest job to start training")
            inference = run.serving_ports()
            with InferenceClient(f"127.0.0.1:{inference[0]}", tls=pki.caller_files(CALLER)) as client:
                width = int(client.metadata(REFERENCE).inputs[0].shape[1])
            campaign = Campaign(run.address, inference, pki, REFERENCE, width)
            started = time.monotonic()
            try:
                campaign.run(cases, seed, report, run.alive)
            finally:
                campaign.close()
            report.seconds = time.monotonic() - started
            report.honest_running_at_end = jobs.get(HONEST).state == "training"
            _finish(jobs, HONEST)
            for info in jobs.list():  # jobs the fuzzer submitted that were valid: they must not linger
                if info.id not in (REFERENCE, HONEST) and info.state in LIVE_STATES:
                    with contextlib.suppress(VflError):  # it ended meanwhile
                        jobs.cancel(info.id)
        report.loss_difference = loss_difference(
            job_outcome(run.root / "runs", HONEST), job_outcome(run.root / "runs", REFERENCE)
        )
        report.crashed = report.crashed or [name for name, up in run.alive().items() if not up]
    finally:
        run.close()
    return report


def _finish(jobs: JobClient, job_id: str) -> None:
    for _ in jobs.watch(job_id):
        pass
    state = jobs.get(job_id).state
    if state != "finished":
        raise RuntimeError(f"job {job_id} ended {state}: {jobs.get(job_id).error}")


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def epochs_for(cases: int) -> int:
    """Epochs of an honest job that outlasts ``cases`` cases: measured here, a batch-8 APFed-C epoch
    took 0.6 s and the campaign sent about 60 cases a second, so cases / 25 leaves some margin."""
    return max(10, cases // 25)


def failed(report: Report) -> list[str]:
    """Every reason the campaign failed: bad answers, dead daemons, a disturbed honest job."""
    reasons = list(report.failures)
    reasons += [f"{name} died" for name in report.crashed]
    if not report.loss_difference <= TOLERANCE:
        reasons.append(f"the honest job's per-step losses differ from the reference by {report.loss_difference:.3g}")
    return reasons
