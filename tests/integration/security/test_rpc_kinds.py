"""Every tensor RPC carries only its own kind of tensor: training, PSI, ADMM state or a head."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.security.tls import channel_credentials
from vflcore.wire import serde as wire
from vflcore.wire.tensors import TensorKey
from vfltesting.in_process import RunningJob, start_job, stop_job
from vfltesting.pki import Pki

pytestmark = pytest.mark.integration


@pytest.fixture(scope="class")
def running(pki: Pki, digits_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningJob]:
    """One job that no party joins, for every case: each call is refused and changes nothing, so the next case
    finds the job as the first did (one job start per case before, six in all)."""
    job = start_job(pki, digits_data, tmp_path_factory.mktemp("rpc-kinds"))
    try:
        yield job
    finally:
        stop_job(job)


class TestRpcKinds:
    @pytest.mark.parametrize(
        ("rpc", "name", "field"),
        [("FetchHead", "embedding", "key.name"), ("SendEmbeddings", "head", "key.name"), ("FetchHead", "head", "key")],
    )
    def test_each_upload_carries_only_its_own_tensors(
        self, running: RunningJob, pki: Pki, rpc: str, name: str, field: str
    ) -> None:
        """A head only on FetchHead, and only when the server asked for it; training tensors never on it.

        Party 2 has not joined this job: the kind of tensor is checked first (INVALID_ARGUMENT), and
        a tensor of the right kind is ABORTED, as a late upload from before a pause is, so that
        the party's daemon takes the job again. A joined party's unasked tensor is INVALID_ARGUMENT
        (``tests/unit/vflserver/federation/test_passive_parties.py``).
        """
        chunks = wire.tensor_to_chunks(TensorKey("test-job", 0, 0, name), np.zeros((2, 3), np.float32))
        with (
            grpc.secure_channel(running.address, channel_credentials(pki.party_files(2))) as channel,
            pytest.raises(grpc.RpcError) as caught,
        ):
            getattr(pb_grpc.FederationStub(channel), rpc)(chunks, timeout=10)
        if field == "key":
            assert caught.value.code() == grpc.StatusCode.ABORTED, caught.value
            assert "party 2 has not joined this run of job 'test-job'" in caught.value.details()
        else:
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details().startswith(field + ":"), caught.value.details()

    @pytest.mark.parametrize(
        ("rpc", "name"), [("PushADMMState", "gradient"), ("ReturnGradients", "admm/dual"), ("PsiDownload", "gradient")]
    )
    def test_each_download_carries_only_its_own_tensors(
        self, running: RunningJob, pki: Pki, rpc: str, name: str
    ) -> None:
        """Asking one download call for another exchange's tensor is INVALID_ARGUMENT naming the key."""
        with grpc.secure_channel(running.address, channel_credentials(pki.party_files(2))) as channel:
            call = getattr(pb_grpc.FederationStub(channel), rpc)
            with pytest.raises(grpc.RpcError) as caught:
                list(call(pb.TensorRequest(key=pb.TensorKey(job_id="test-job", name=name)), timeout=10))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("key.name") and rpc in caught.value.details()
