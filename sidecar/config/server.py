"""``server``: the gRPC listener, its TLS, its Unix socket, capacity and the light path
under load."""

from __future__ import annotations

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from sidecar.config.base import _Strict


class ServerTlsConfig(_Strict):
    """TLS on the sidecar's endpoint; with ``client_ca_file``, mutual TLS."""

    cert_file: str
    """PEM certificate chain the sidecar presents."""
    key_file: str
    """PEM private key of that certificate."""
    client_ca_file: str | None = None
    """PEM CA bundle that client certificates must chain to; set, every caller must
    present one (mutual TLS), and a principal may be named by its certificate's SAN."""
    reload_interval: float = Field(5.0, gt=0)
    """Seconds between checks of the files; a changed file is used for new connections
    from then on, calls in flight keep theirs."""


_MAX_SOCKET_PATH = 107
"""Bytes of a Unix socket's path: ``sun_path`` holds 108 with the terminating NUL."""


class LightPathConfig(_Strict):
    """When new runs take their profile's light path (``profiles.NAME.light``) instead of
    the full one: while the runs in flight are near ``max_concurrent_runs``, with
    hysteresis so a sidecar at the threshold does not flip on every run."""

    enter: float = Field(0.5, gt=0, le=1)
    """The sidecar is overloaded once this share of ``max_concurrent_runs`` is in flight:
    new runs of a profile with a light variant take it. The full runs in flight keep their
    places, so the light runs have the rest of the capacity to absorb a burst in. Default
    0.5: half of it (measured, ``make bench``: at three quarters, full runs let in at each
    end of overload left too little room, and some light runs were refused)."""
    leave: float = Field(0.25, ge=0, lt=1)
    """It is no longer overloaded once the runs in flight fall to this share: new runs take
    the full path again. Default 0.25: the gap keeps it from flipping at the threshold."""

    @model_validator(mode="after")
    def _leave_below_enter(self) -> LightPathConfig:
        if self.leave >= self.enter:
            raise ValueError("leave must be below enter")
        return self


class ServerConfig(_Strict):
    """The sidecar's own gRPC endpoint."""

    host: str = "127.0.0.1"
    """Interface to bind; ``0.0.0.0`` to accept connections from other hosts."""
    port: int = Field(50051, ge=0, le=65535)
    """Port to bind; 0 picks a free one (the chosen port is printed at start)."""
    grace_period: float = Field(10.0, ge=0)
    """Seconds in-flight runs get to finish after SIGTERM."""
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    """Largest gRPC message accepted or sent. An answer may take half of it (a longer one
    ends the run ``answer_too_large``), a tool call's arguments or result a quarter."""
    max_concurrent_runs: int = Field(1024, ge=1)
    """Runs in flight at once in this process; one more is refused with
    RESOURCE_EXHAUSTED (reason OVERLOADED, with a retry delay) before anything runs."""
    light_path: LightPathConfig = LightPathConfig()
    """When new runs of a profile with a light variant take it (near capacity)."""
    stream_buffer_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)
    """Bytes of events a stream holds for a caller that reads them too slowly: past it
    the model's stream pauses until the caller takes events; a caller that takes none
    for 5 s meanwhile, or lets twice this pile up, has its run cancelled and the stream
    ends RESOURCE_EXHAUSTED (STREAM_BACKLOG). A slow reader costs at most twice this;
    one that keeps up is never cut off."""
    tls: ServerTlsConfig | None = None
    """TLS (and mutual TLS) on the endpoint; unset: plaintext, allowed on loopback only
    unless ``insecure``."""
    insecure: bool = False
    """Allow binding an address other than loopback without TLS or without caller
    authentication (``auth.principals``); the sidecar then warns at start. Without it,
    such a setup stops the sidecar at start."""
    reflection: bool = True
    """Serve gRPC server reflection (v1 and v1alpha), open to every caller like health."""
    health_port: int | None = Field(None, ge=0, le=65535)
    """A second, plaintext port that serves only ``grpc.health.v1`` (for probes that
    speak no TLS, such as the kubelet's); unset: none."""
    config_watch_interval: float | None = Field(2.0, gt=0)
    """Seconds between checks of the configuration file; a changed file is reloaded
    (as on SIGHUP). ``null``: only SIGHUP reloads."""
    unix_socket: str | None = Field(None, min_length=1)
    """The path of a Unix domain socket the endpoint listens on besides its TCP port,
    with the same TLS and callers, for callers on the same host or in the same pod (a
    shared ``emptyDir``); they dial ``unix:PATH``. Created mode 0660 (the sidecar's user
    and group); a socket left by a process that died is replaced, one a live process
    listens on stops the sidecar at start. Unset: none."""

    @field_validator("unix_socket")
    @classmethod
    def _socket_path(cls, path: str | None) -> str | None:
        if path is None:
            return None
        if path.startswith("unix:"):
            raise ValueError("a path, without the unix: prefix callers dial")
        if path.endswith("/"):
            raise ValueError("the socket's own path, not its directory")
        if len(path.encode()) > _MAX_SOCKET_PATH:
            raise ValueError(f"at most {_MAX_SOCKET_PATH} bytes (the limit of a socket address)")
        return path
