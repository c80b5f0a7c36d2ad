"""The sidecar over TLS with a caller's token, its tool servers over mutual TLS with a token.

The worker's environment names the CA to trust (``BENCH_CA_FILE``), the name on the
sidecar's certificate (``BENCH_SERVER_NAME``) and the caller's token (``BENCH_TOKEN``).
"""

from __future__ import annotations

import os

import grpc

from agentsidecar.tls import channel_credentials
from agentsidecar.v1 import agent_pb2_grpc
from bench.peers.contenders import sidecar


class Contender(sidecar.Contender):
    def _stub(self, target: str) -> agent_pb2_grpc.AgentServiceStub:
        stub = self._stubs.get(target)
        if stub is None:
            credentials = channel_credentials(tls=True, ca_file=os.environ["BENCH_CA_FILE"])
            assert credentials is not None
            options = [("grpc.ssl_target_name_override", os.environ["BENCH_SERVER_NAME"])]
            stub = self._stubs[target] = agent_pb2_grpc.AgentServiceStub(
                grpc.aio.secure_channel(target, credentials, options=options)
            )
        return stub

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {os.environ['BENCH_TOKEN']}"),)
