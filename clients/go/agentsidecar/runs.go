package agentsidecar

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// Background runs: turns that go on without their caller.
type (
	// BackgroundRun is a background run as the sidecar keeps it: its state, its times, its
	// pending approvals, and its result once it finished (GetRun and CancelRun only).
	BackgroundRun = pb.Run
	// RunState is where a background run is (A2A's task states, value for value).
	RunState = pb.RunState
)

// Background-run states.
const (
	RunSubmitted     = pb.RunState_RUN_STATE_SUBMITTED
	RunWorking       = pb.RunState_RUN_STATE_WORKING
	RunInputRequired = pb.RunState_RUN_STATE_INPUT_REQUIRED
	RunCompleted     = pb.RunState_RUN_STATE_COMPLETED
	RunFailed        = pb.RunState_RUN_STATE_FAILED
	RunCanceled      = pb.RunState_RUN_STATE_CANCELED
	RunRejected      = pb.RunState_RUN_STATE_REJECTED
)

// RunFinished reports whether a background run's state is final.
func RunFinished(state RunState) bool {
	switch state {
	case RunCompleted, RunFailed, RunCanceled, RunRejected:
		return true
	}
	return false
}

// WithCallback has StartRun's run tell its final state to url when it finishes (a signed
// POST; see docs/background-runs.md). Run and Stream ignore it.
func WithCallback(url string) RunOption {
	return func(o *runOptions) { o.callback = url }
}

// WithRequestID gives StartRun a key made for this run (a UUID): a retry with the same
// key after a lost answer returns the run the first call started instead of starting
// another. Run and Stream ignore it.
func WithRequestID(id string) RunOption {
	return func(o *runOptions) { o.request = id }
}

// StartRun starts a background run of one user turn and returns it at once (submitted,
// or later): the run goes on without the caller. WithOutputMode (Streamed unless set),
// WithCallback and WithRequestID apply. A session whose background run has not finished
// fails with ErrSessionBusy; a full queue with ErrRunQueueFull or ErrQuotaExceeded (retry
// after RetryDelay). Safe to retry only WithRequestID: without it, a retry after a lost
// answer starts a second run.
func (c *Client) StartRun(ctx context.Context, sessionID, input string, opts ...RunOption) (*BackgroundRun, error) {
	cfg := runConfig(opts)
	req := &pb.StartRunRequest{
		SessionId: sessionID, Input: input, OutputMode: cfg.mode, RequestId: cfg.request,
	}
	if cfg.callback != "" {
		req.Callback = &pb.RunCallback{Url: cfg.callback}
	}
	resp, err := c.rpc.StartRun(ctx, req)
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	return resp.GetRun(), nil
}

// GetRun returns a background run, with its result once it finished. An unknown run
// (or another principal's) fails with ErrRunNotFound.
func (c *Client) GetRun(ctx context.Context, runID string) (*BackgroundRun, error) {
	resp, err := c.rpc.GetRun(ctx, &pb.GetRunRequest{RunId: runID})
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	return resp.GetRun(), nil
}

// ListRuns returns a page of a session's background runs, newest first, without their
// results, and the token of the next page ("" after the last). A pageSize of 0 means 50.
func (c *Client) ListRuns(ctx context.Context, sessionID string, pageSize uint32, pageToken string) ([]*BackgroundRun, string, error) {
	resp, err := c.rpc.ListRuns(ctx, &pb.ListRunsRequest{
		SessionId: sessionID, PageSize: pageSize, PageToken: pageToken,
	})
	if err != nil {
		return nil, "", fromRPC(ctx, err)
	}
	return resp.GetRuns(), resp.GetNextPageToken(), nil
}

// CancelRun cancels a background run, with its tool calls in flight, and returns it once
// the cancellation took effect (canceled), or as it finished when it had. Safe to retry.
func (c *Client) CancelRun(ctx context.Context, runID string) (*BackgroundRun, error) {
	resp, err := c.rpc.CancelRun(ctx, &pb.CancelRunRequest{RunId: runID})
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	return resp.GetRun(), nil
}

// WatchRun yields a background run's events after afterSequence (0: all of them), the
// stored ones first, then each as it is stored, until the last one (run_finished):
//
//	for event, err := range client.WatchRun(ctx, runID, lastSeen) {
//		if err != nil {
//			return err
//		}
//		lastSeen = event.GetSequence()
//	}
//
// A stream that breaks off before the last event (the sidecar restarting, a replica
// stopping, the network) is watched again from the last event yielded, after a short
// backoff, until ctx ends: no event is missed and none is yielded twice. An error is
// yielded once, last: an *Error that watching again cannot mend (ErrRunNotFound ...), or
// matching context.Canceled or context.DeadlineExceeded when ctx ended it. Leaving the
// loop early ends the watch (never the run: CancelRun does that).
func (c *Client) WatchRun(ctx context.Context, runID string, afterSequence uint32) iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		last, backoff := afterSequence, 50*time.Millisecond
		for {
			done, err := c.watchOnce(ctx, runID, &last, yield)
			if done {
				return
			}
			if !reconnectable(ctx, err) {
				yield(nil, err)
				return
			}
			select {
			case <-ctx.Done():
				yield(nil, fromRPC(ctx, ctx.Err()))
				return
			case <-time.After(backoff):
			}
			backoff = min(2*time.Second, backoff*2)
		}
	}
}

// watchOnce reads one WatchRun stream; done when the watch is over (the last event, the
// caller left the loop, or a clean end), else the error that broke it off.
func (c *Client) watchOnce(ctx context.Context, runID string, last *uint32, yield func(*Event, error) bool) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.WatchRun(ctx, &pb.WatchRunRequest{RunId: runID, AfterSequence: *last})
	if err != nil {
		return false, fromRPC(ctx, err)
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return true, nil // ended cleanly: every event after the last one sent
		}
		if err != nil {
			return false, fromRPC(ctx, err)
		}
		event := resp.GetEvent()
		*last = event.GetSequence()
		if !yield(event, nil) || event.GetRunFinished() != nil {
			return true, nil
		}
	}
}

// reconnectable reports whether watching again may mend err: the stream broke off, and
// not because the caller's context ended.
func reconnectable(ctx context.Context, err error) bool {
	var e *Error
	if ctx.Err() != nil || !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Aborted:
		return e.Reason == ""
	}
	return false
}
