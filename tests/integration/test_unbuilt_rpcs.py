"""An RPC whose algorithm has not landed answers UNIMPLEMENTED, never fake data; the others keep to their tensors."""

from __future__ import annotations

import grpc
import pytest

from tests.conftest import Pki
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.tls import channel_credentials

pytestmark = pytest.mark.integration


class TestUnbuiltRpcs:
    def test_fetch_head_is_unimplemented(self, job_factory, pki: Pki) -> None:
        """FetchHead (VIMADMM-J) returns UNIMPLEMENTED with a sentence saying why."""
        running = job_factory()
        request = pb.TensorRequest(key=pb.TensorKey(job_id="test-job", name="head"))
        with (
            grpc.secure_channel(running.address, channel_credentials(pki.party_files(2))) as channel,
            pytest.raises(grpc.RpcError) as caught,
        ):
            list(pb_grpc.FederationStub(channel).FetchHead(request, timeout=10))
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "no algorithm of this release uses it" in caught.value.details()

    @pytest.mark.parametrize(
        ("rpc", "name"), [("PushADMMState", "gradient"), ("ReturnGradients", "admm/dual"), ("PsiDownload", "gradient")]
    )
    def test_each_download_carries_only_its_own_tensors(self, job_factory, pki: Pki, rpc: str, name: str) -> None:
        """Asking one download call for another exchange's tensor is INVALID_ARGUMENT naming the key."""
        running = job_factory()
        with grpc.secure_channel(running.address, channel_credentials(pki.party_files(2))) as channel:
            call = getattr(pb_grpc.FederationStub(channel), rpc)
            with pytest.raises(grpc.RpcError) as caught:
                list(call(pb.TensorRequest(key=pb.TensorKey(job_id="test-job", name=name)), timeout=10))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("key.name") and rpc in caught.value.details()
