"""RPCs whose algorithms have not landed answer UNIMPLEMENTED, never fake data."""

from __future__ import annotations

import grpc
import pytest

from tests.conftest import Pki
from vflcore.proto import federation_pb2 as pb
from vflcore.proto import federation_pb2_grpc as pb_grpc
from vflcore.tls import channel_credentials

pytestmark = pytest.mark.integration


class TestUnbuiltRpcs:
    @pytest.mark.parametrize("rpc", ["PushADMMState", "FetchHead"])
    def test_vim_rpcs_are_unimplemented(self, job_factory, pki: Pki, rpc: str) -> None:
        """PushADMMState and FetchHead return UNIMPLEMENTED with a sentence saying why."""
        running = job_factory()
        with grpc.secure_channel(running.address, channel_credentials(pki.party_files(2))) as channel:
            call = getattr(pb_grpc.FederationStub(channel), rpc)
            with pytest.raises(grpc.RpcError) as caught:
                list(call(pb.TensorRequest(key=pb.TensorKey(job_id="test-job", name="head")), timeout=10))
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "no algorithm of this release uses it" in caught.value.details()
