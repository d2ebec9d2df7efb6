"""Fuzz targets on the live service: every RPC, PSI's chunk streams, job tables, files, the console, inference.

Four identities send them:

- **party 4**, a certified party that is not in the job, at every federation RPC and PSI stream;
- **party 3**, a member of the job, at the RPCs it can call without speaking for the honest
  daemon: uploads and PSI streams (whose keys of the honest jobs are moved to rounds they never
  wait for, so no mutant can be an upload they accept), Heartbeat and Subscribe. A member that
  sends NextJob or ReportFailure, or takes its own gradients, pauses or fails its own job by
  design: the recovery tests cover that;
- **operator** "alice" at every Control RPC (never naming the reference or an honest job), with
  job documents whose ``[privacy]`` and ``[distill]`` tables are mutated, with jobs on a dataset
  whose file each case rewrites (the server reads it at submission), and at the console's routes;
- **caller** "fuzz-caller" at every inference RPC and at REST; by ID at a served federated model.

A case fails if the service answers UNKNOWN or INTERNAL, HTTP 500, a refusal with no message, or
an INVALID_ARGUMENT whose message names no field (for a file: not the file). A job the fuzzer
submits that is accepted is cancelled at once, so it never runs between the honest jobs.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import numpy as np
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from vflclient import JobClient
from vflcore.errors import VflError
from vflcore.job.distill import distill_keys
from vflcore.job.privacy import privacy_keys
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import open_inference_pb2 as oip
from vflcore.security.tls import TlsFiles, channel_credentials
from vflcore.wire import serde as wire
from vflcore.wire.tensors import TensorKey
from vfltesting.fuzz import strategies as fz
from vfltesting.fuzz import surfaces
from vfltesting.fuzz.report import Target, Verdict
from vfltesting.pki import Pki
from vfltesting.rpc import CONTROL, FEDERATION, INFERENCE, Rpc
from vfltesting.service import job_document

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
#: A long-lived call is ended this soon (it was waiting, as it should); any other call may take this long.
HELD_OPEN_S, CALL_TIMEOUT_S = 0.25, 10.0
#: Keys of an honest job that a member's mutants carry are moved to rounds from here on.
NEVER_ROUND = 1_000_000
REFERENCE, HONEST = "fuzz-reference", "fuzz-honest"
CALLER, OPERATOR = "fuzz-caller", "alice"
#: The datasets whose file each "files" case rewrites, by suffix: only the active party has them.
FUZZ_TABLES = {".csv": "fuzz-csv", ".parquet": "fuzz-parquet"}
#: A message "names a field" when it starts with one ("shape: ...") or mentions one.
_FIELD_PREFIX = re.compile(r"^[\w.\[\]' -]{1,80}:")
_DOMAIN_WORDS = ("input", "output", "job document", "request body", "key", "dataset")
#: A config table or key, as job documents name them: "[job] epochs", "[datasets]".
_CONFIG_KEY = re.compile(r"\[\w+\]")


def is_ours(job_id: str) -> bool:
    """The reference job and every honest job: no case may name them where that would change them."""
    return job_id == REFERENCE or job_id.startswith(HONEST)


# ---- judging answers -----------------------------------------------------------------------------------


def _field_names(descriptor: Descriptor, seen: set[str] | None = None) -> set[str]:
    found = seen if seen is not None else set()
    for item in descriptor.fields:
        if item.name not in found:
            found.add(item.name)
            if item.message_type is not None:
                _field_names(item.message_type, found)
    return found


def judge_grpc(rpc: Rpc, call: Callable[[], object], names_what: Callable[[str], bool] | None = None) -> Verdict:
    """The verdict on one call; ``names_what`` replaces the field check of an INVALID_ARGUMENT's message."""
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
        named = names_what(details) if names_what is not None else _names_a_field(details, rpc)
        if code == grpc.StatusCode.INVALID_ARGUMENT and not named:
            return Verdict(code.name, f"INVALID_ARGUMENT names no field: {details}")
        return Verdict(code.name)
    return Verdict("OK")


def _names_a_field(details: str, rpc: Rpc) -> bool:
    if _FIELD_PREFIX.match(details) or _CONFIG_KEY.search(details):
        return True
    names = _field_names(rpc.request.DESCRIPTOR)
    return any(name in details for name in names) or any(word in details for word in _DOMAIN_WORDS)


def _judge_http(status: int, payload: bytes, *, json_error: bool) -> Verdict:
    text = str(status)
    if status >= 500 and status != 503:
        return Verdict(text, f"HTTP {text}: {payload[:200]!r}")
    if status >= 400 and json_error:
        try:
            message = json.loads(payload)["error"]
        except (ValueError, KeyError, TypeError):
            return Verdict(text, f"HTTP {text} without a JSON error: {payload[:200]!r}")
        if not isinstance(message, str) or not message.strip():
            return Verdict(text, f"HTTP {text} with an empty error")
    return Verdict(text)


# ---- the targets ---------------------------------------------------------------------------------------


class LiveTargets:
    """The live service's targets, their channels and connections."""

    def __init__(
        self, address: str, inference: tuple[int, int], console: int, pki: Pki, fuzz_tables: Path, width: int
    ) -> None:
        self.address, self.pki, self.width = address, pki, width
        self.grpc_inference, self.rest_port = inference
        self.console_port, self.fuzz_tables = console, fuzz_tables
        self._channels: list[grpc.Channel] = []
        self._https: dict[int, http.client.HTTPSConnection] = {}
        self._contexts = {
            self.rest_port: _context(pki.caller_files(CALLER)),
            console: _context(pki.operator_files(OPERATOR)),
        }
        self.jobs = JobClient(address, tls=pki.operator_files(OPERATOR))
        self._files = 0

    def close(self) -> None:
        self.jobs.close()
        for channel in self._channels:
            channel.close()
        for connection in self._https.values():
            connection.close()

    def _channel(self, files: TlsFiles, port_address: str | None = None) -> grpc.Channel:
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        channel = grpc.secure_channel(port_address or self.address, channel_credentials(files), options=options)
        self._channels.append(channel)
        return channel

    def targets(self) -> list[Target]:
        jobs = [REFERENCE, f"{HONEST}-1", f"{HONEST}-2", "", "other-job"]
        outsider = self._channel(self.pki.party_files(4))
        member = self._channel(self.pki.party_files(3))
        operator = self._channel(self.pki.operator_files(OPERATOR))
        caller = self._channel(self.pki.caller_files(CALLER), f"127.0.0.1:{self.grpc_inference}")
        found: list[Target] = []
        for rpc in FEDERATION:
            found.append(self._grpc(rpc, outsider, "party 4", "federation", _federation_cases(rpc, jobs, _as_is)))
        for rpc in FEDERATION:
            if rpc.client_streaming or rpc.name in ("Heartbeat", "Subscribe"):
                inside = _federation_cases(rpc, jobs, _never_awaited)
                found.append(self._grpc(rpc, member, "party 3", "federation", inside))
        for rpc in FEDERATION:
            for who, channel, safe in (("party 4", outsider, _as_is), ("party 3", member, _never_awaited)):
                if rpc.name == "PsiUpload":
                    found.append(
                        self._grpc(rpc, channel, who, "psi", surfaces.psi_streams(jobs, safe), label="streams")
                    )
                elif rpc.name == "PsiDownload":
                    requests = surfaces.psi_requests(jobs, safe).map(lambda m: [m])
                    found.append(self._grpc(rpc, channel, who, "psi", requests, label="out of order"))
        valid = job_document("fuzz-valid", "apfed_c", passive_parties=[2, 3])
        for rpc in CONTROL:
            cases: st.SearchStrategy[Any] = fz.messages(rpc.request).map(_spare_jobs)
            if rpc.name == "Submit":
                cases = cases | fz.job_document_mutants(valid).map(_submit_request)
            found.append(self._grpc(rpc, operator, "operator", "control", cases.map(lambda m: [m])))
        submit = next(rpc for rpc in CONTROL if rpc.name == "Submit")
        tables = {**valid, "privacy": {"embedding_clip": 1.0}, "distill": {"temperature": 2.0}}
        mutants = surfaces.job_table_mutants(tables, privacy_keys(), distill_keys())
        found.append(
            self._grpc(
                submit,
                operator,
                "operator",
                "job tables",
                mutants.map(lambda d: [_submit_request(json.dumps(d))]),
                label="[privacy] and [distill]",
            )
        )
        found.append(
            Target(
                "Control.Submit, a table read at submission, as operator",
                "files",
                surfaces.table_files(),
                lambda case: self._file_case(submit, operator, case),
            )
        )
        for rpc in INFERENCE:
            cases = fz.messages(rpc.request)
            if rpc.name == "ModelInfer":
                cases = cases | fz.infer_mutants(REFERENCE, "features", self.width)
            found.append(self._grpc(rpc, caller, "caller", "inference", cases.map(lambda m: [m])))
        found.append(Target("REST as caller", "rest", fz.rest_mutants(REFERENCE, "features", self.width), self._rest))
        found.append(
            Target(
                "the console as operator", "console", surfaces.console_routes([REFERENCE, "nope", ""]), self._console
            )
        )
        return found

    def by_id_targets(self, model: str, aligned: list[str]) -> list[Target]:
        """ModelInfer and REST by sample ID, at a served federated model (while no honest job trains).

        ``aligned`` is filled once the model is served, before the first case is drawn: half the
        IDs drawn are its aligned ones, so that requests are answered as well as refused.
        """
        caller = self._channel(self.pki.caller_files(CALLER), f"127.0.0.1:{self.grpc_inference}")
        infer = next(rpc for rpc in INFERENCE if rpc.name == "ModelInfer")
        known = st.deferred(lambda: st.sampled_from(aligned))
        ids = st.lists(known, min_size=1, max_size=6) | st.lists(known | surfaces.id_strings(), max_size=6)
        grpc_cases = ids.map(lambda values: [_by_id_request(model, values)])
        rest_cases: st.SearchStrategy[tuple[str, str, bytes, dict[str, str]]] = ids.map(
            lambda values: ("POST", f"/v2/models/{model}/infer", _by_id_body(values), {})
        )
        return [
            self._grpc(infer, caller, "caller", "ids", grpc_cases, label="by ID"),
            Target("REST by ID as caller", "ids", rest_cases, self._rest),
        ]

    def _grpc(
        self,
        rpc: Rpc,
        channel: grpc.Channel,
        who: str,
        surface: str,
        cases: st.SearchStrategy[list[Message]],
        *,
        label: str = "",
    ) -> Target:
        def send(requests: list[Message]) -> Verdict:
            timeout = HELD_OPEN_S if rpc.name in LONG_LIVED else CALL_TIMEOUT_S
            verdict = judge_grpc(rpc, lambda: rpc.call(channel, requests, timeout=timeout))
            if rpc.name == "Submit" and verdict.status == "OK":
                self.cancel_accepted()
            return verdict

        return Target(f"{rpc}{' ' + label if label else ''} as {who}", surface, cases, send)

    def cancel_accepted(self) -> None:
        """Cancel every live job the fuzzer got accepted: none may run between the honest jobs."""
        for info in self.jobs.list():
            if not is_ours(info.id) and info.state in ("queued", "aligning", "training", "waiting"):
                with contextlib.suppress(VflError):  # it ended meanwhile
                    self.jobs.cancel(info.id)

    def _file_case(self, submit: Rpc, channel: grpc.Channel, case: tuple[str, bytes]) -> Verdict:
        """Write the table, then submit a job whose student makes the server read it at once."""
        suffix, data = case
        path = self.fuzz_tables / f"party1{suffix}"
        path.write_bytes(data)
        self._files += 1
        document = job_document(f"fuzz-file-{self._files}", "splitnn", dataset=FUZZ_TABLES[suffix])
        document["distill"] = {}
        request = _submit_request(json.dumps(document))
        verdict = judge_grpc(
            submit, lambda: submit.call(channel, [request], timeout=CALL_TIMEOUT_S), lambda d: path.name in d
        )
        if verdict.status == "OK":
            self.cancel_accepted()
        return verdict

    def _https_request(
        self, port: int, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        for attempt in (1, 2):
            if port not in self._https:
                self._https[port] = http.client.HTTPSConnection(
                    "127.0.0.1", port, context=self._contexts[port], timeout=10
                )
            connection = self._https[port]
            try:
                connection.request(method, path, body or None, headers)
                response = connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException):
                connection.close()
                del self._https[port]
                if attempt == 2:
                    raise
                continue
            if response.getheader("Connection", "").lower() == "close":
                connection.close()
                del self._https[port]
            return response.status, payload, response.getheader("Content-Type", "")
        raise AssertionError("unreachable")

    def _rest(self, case: tuple[str, str, bytes, dict[str, str]]) -> Verdict:
        method, path, body, headers = case
        path = "/".join(quote(part, safe="") for part in path.split("/"))
        try:
            status, payload, _ = self._https_request(self.rest_port, method, path, body, headers)
        except (OSError, http.client.HTTPException) as exc:
            return Verdict("connection failed", f"the REST endpoint dropped the request: {exc!r}")
        return _judge_http(status, payload, json_error=True)

    def _console(self, case: tuple[str, str]) -> Verdict:
        method, path = case
        path = "/".join(quote(part, safe="?=") for part in path.split("/"))
        try:
            status, payload, _ = self._https_request(self.console_port, method, path, b"", {})
        except (OSError, http.client.HTTPException) as exc:
            return Verdict("connection failed", f"the console dropped the request: {exc!r}")
        return _judge_http(status, payload, json_error=False)


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


def _as_is(key: TensorKey) -> TensorKey:
    return key


def _never_awaited(key: TensorKey) -> TensorKey:
    """A key of an honest job moved to a round it never waits for; any other key unchanged."""
    if not is_ours(key.job_id):
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
    """Control requests never name the reference or an honest job (cancelling them is allowed, not a bug)."""
    if is_ours(getattr(message, "job_id", "")):
        message.job_id = "fuzz-" + message.job_id
    return message


def _by_id_request(model: str, ids: list[str]) -> oip.ModelInferRequest:
    request = oip.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="id", datatype="BYTES", shape=[len(ids)])
    tensor.contents.bytes_contents.extend(i.encode("utf-8", "surrogatepass") for i in ids)
    return request


def _by_id_body(ids: list[str]) -> bytes:
    entry = {"name": "id", "shape": [len(ids)], "datatype": "BYTES", "data": ids}
    return json.dumps({"inputs": [entry]}).encode("utf-8", "surrogatepass")


def known_predictions(client: Any, model: str, ids: list[str]) -> dict[str, np.ndarray]:
    """The served model's outputs for ``ids`` (an ``InferenceClient``): the by-ID cases must not change them."""
    found: dict[str, np.ndarray] = client.infer(model, {"id": np.array(ids, dtype=object)})
    return found


def _context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(files.cert), str(files.key))
    return context
