package toolserver

import (
	"context"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// drainingHealth is grpc-go's health service, except that a Watch stream ends (with
// OK) once the server drains and the stream has sent NOT_SERVING. GracefulStop waits
// for every stream to end, and the sidecar keeps a Watch stream open for as long as it
// is connected: without this, every graceful stop would last its whole grace period.
type drainingHealth struct {
	*health.Server
	draining chan struct{} // closed when draining starts, before Shutdown
}

func (h *drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &endingWatch{Health_WatchServer: stream, ctx: ctx, cancel: cancel, draining: h.draining}
	err := h.Server.Watch(req, w)
	if w.ended {
		return nil
	}
	return err
}

// endingWatch is a Watch stream whose context ends after it has sent NOT_SERVING while
// the server drains, which ends grpc-go's Watch loop.
type endingWatch struct {
	healthpb.Health_WatchServer
	ctx      context.Context
	cancel   context.CancelFunc
	draining <-chan struct{}
	ended    bool
}

func (w *endingWatch) Context() context.Context { return w.ctx }

func (w *endingWatch) Send(m *healthpb.HealthCheckResponse) error {
	if err := w.Health_WatchServer.Send(m); err != nil {
		return err
	}
	select {
	case <-w.draining:
		if m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			w.ended = true
			w.cancel()
		}
	default:
	}
	return nil
}
