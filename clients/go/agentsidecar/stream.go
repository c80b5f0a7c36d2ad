package agentsidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// ErrStreamCut is returned (wrapped) when a run's event stream ends without its
// run_finished event, which the sidecar always sends last.
var ErrStreamCut = errors.New("agentsidecar: the event stream ended before run_finished")

// Decision is the answer to an approval request: approve the call, or deny it with a
// reason the model sees.
type Decision struct {
	// Approve runs the call; false denies it.
	Approve bool
	// Reason is shown to the model when the call is denied; may be empty.
	Reason string
}

// Approver decides a tool call that waits for approval. Stream calls it when an
// approval_required event arrives, sends its decision, then yields the event. It runs
// on the goroutine that ranges over the stream, so the stream's later events wait for
// it (the sidecar waits for the decision anyway). An error ends the stream with that
// error and cancels the run.
type Approver func(ctx context.Context, call *ApprovalRequired) (Decision, error)

// RunOption configures Run, Stream and StartRun.
type RunOption func(*runOptions)

type runOptions struct {
	mode     pb.OutputMode
	approver Approver
	callback string
	request  string
}

func runConfig(opts []RunOption) runOptions {
	var cfg runOptions
	for _, opt := range opts {
		opt(&cfg)
	}
	return cfg
}

// WithOutputMode says how the answer is delivered: Streamed (text as it is generated)
// or Structured (the final result only, validated against the profile's answer
// schema). Unset, Stream streams and Run is structured.
func WithOutputMode(mode OutputMode) RunOption {
	return func(o *runOptions) { o.mode = mode }
}

// WithApprover has Stream decide approval requests with fn (see Approver). Without one,
// approval_required events are yielded like any other and the caller decides with
// Client.Approve or Client.Deny (from the loop's body or another goroutine). Run ignores
// it: unary runs deny calls that need approval.
func WithApprover(fn Approver) RunOption {
	return func(o *runOptions) { o.approver = fn }
}

// Stream runs one user turn and yields its events as they happen; the last one carries
// run_finished. The call starts when the loop starts:
//
//	for event, err := range client.Stream(ctx, sessionID, "Where is order 20250101?") {
//		if err != nil {
//			return err // the stream is over
//		}
//		if finished := event.GetRunFinished(); finished != nil {
//			fmt.Println(finished.GetAnswer())
//		}
//	}
//
// An error is yielded once, as the last element, with a nil event: an *Error for a
// failed call (ErrSessionBusy, ErrSessionNotFound ...), matching context.Canceled or
// context.DeadlineExceeded when ctx ended the call. Cancelling ctx, or leaving the loop
// early, cancels the run and every tool call in flight.
func (c *Client) Stream(ctx context.Context, sessionID, input string, opts ...RunOption) iter.Seq2[*Event, error] {
	cfg := runConfig(opts)
	return func(yield func(*Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // leaving the loop early cancels the run
		stream, err := c.rpc.StreamRun(ctx, &pb.StreamRunRequest{
			SessionId: sessionID, Input: input, OutputMode: cfg.mode,
		})
		if err != nil {
			yield(nil, fromRPC(ctx, err))
			return
		}
		finished := false
		for {
			event, err := stream.Recv()
			if err == io.EOF {
				if !finished {
					yield(nil, fmt.Errorf("session %s: %w", sessionID, ErrStreamCut))
				}
				return
			}
			if err != nil {
				yield(nil, fromRPC(ctx, err))
				return
			}
			if call := event.GetApprovalRequired(); call != nil && cfg.approver != nil {
				if err := c.approve(ctx, sessionID, call, cfg.approver); err != nil {
					yield(nil, err)
					return
				}
			}
			finished = event.GetRunFinished() != nil
			if !yield(event, nil) {
				return
			}
		}
	}
}

// approve asks the approver and sends its decision. A call that no longer waits
// (CALL_NOT_PENDING: it timed out, or the run ended) is no failure of the stream: the
// stream's own events say how the call ended.
func (c *Client) approve(ctx context.Context, sessionID string, call *ApprovalRequired, fn Approver) error {
	decision, err := fn(ctx, call)
	if err != nil {
		return fmt.Errorf("agentsidecar: approver for call %s: %w", call.GetCallId(), err)
	}
	err = c.decide(ctx, sessionID, call.GetCallId(), decision)
	if errors.Is(err, ErrCallNotPending) {
		return nil
	}
	return err
}
