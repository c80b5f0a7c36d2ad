"""The agent sidecar daemon."""

from agentsidecar.grpc_io import load_grpc

load_grpc()  # before any module of the package imports grpc
