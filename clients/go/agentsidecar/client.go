// Package agentsidecar is the Go client of the agent sidecar: sessions, runs (unary or
// streamed as an iterator of events), approvals, and errors read from the reasons the
// sidecar attaches to its statuses.
//
//	client, err := agentsidecar.Dial("127.0.0.1:50051")
//	if err != nil { ... }
//	defer client.Close()
//	session, err := client.CreateSession(ctx, "default")
//	for event, err := range client.Stream(ctx, session.GetSessionId(), "Where is order 20250101?") {
//		if err != nil { ... }
//		fmt.Print(event.GetTextDelta().GetText())
//	}
//
// Every method takes a context.Context: its deadline is the call's gRPC deadline (a run's
// deadline bounds every model and tool call the sidecar makes for it), and cancelling it
// cancels the call (a run stops, with its tool calls). The messages are the generated
// types of package agentsidecarv1, under shorter names here.
package agentsidecar

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// Aliases of the generated messages a caller meets most.
type (
	// Session is one conversation under one agent profile.
	Session = pb.Session
	// Event is one event of a streamed run; exactly one of its payloads is set
	// (GetRunStarted, GetTextDelta, GetToolCallStarted, GetToolCallFinished,
	// GetApprovalRequired, GetStepFinished, GetBudgetExceeded, GetRunFinished).
	Event = pb.StreamRunResponse
	// RunResponse is a finished unary run: its id and its result.
	RunResponse = pb.RunResponse
	// RunResult is the outcome of a run: answer, stop reason, usage, cost, timeline.
	RunResult = pb.RunResult
	// ApprovalRequired announces a tool call that waits for a decision.
	ApprovalRequired = pb.ApprovalRequired
	// SessionTool is one tool as a session sees it.
	SessionTool = pb.SessionTool
	// OutputMode says how a run delivers its answer.
	OutputMode = pb.OutputMode
)

// Output modes for WithOutputMode.
const (
	// Streamed streams the model's text as text_delta events (StreamRun's default).
	Streamed = pb.OutputMode_OUTPUT_MODE_STREAMED
	// Structured produces only the final result, validated against the profile's
	// answer schema when it declares one (Run's default).
	Structured = pb.OutputMode_OUTPUT_MODE_STRUCTURED
)

// Client calls one sidecar. It is safe for concurrent use.
type Client struct {
	conn grpc.ClientConnInterface
	owns *grpc.ClientConn
	rpc  pb.AgentServiceClient
}

// Dial makes a client of the sidecar at target ("host:port", or any gRPC target). It
// connects in plaintext, which suits a sidecar on loopback; pass
// grpc.WithTransportCredentials(...) to use TLS, since later options win. Dial does not
// wait for the connection: the first call does. Close the client when done.
func Dial(target string, opts ...grpc.DialOption) (*Client, error) {
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, err
	}
	c := New(conn)
	c.owns = conn
	return c, nil
}

// New makes a client over a connection the caller owns (and closes).
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{conn: conn, rpc: pb.NewAgentServiceClient(conn)}
}

// Close closes the connection Dial opened; it does nothing for a client made by New.
func (c *Client) Close() error {
	if c.owns == nil {
		return nil
	}
	return c.owns.Close()
}

// Stub returns the generated client, for what this package does not wrap.
func (c *Client) Stub() pb.AgentServiceClient { return c.rpc }

// SessionOption configures CreateSession.
type SessionOption func(*pb.CreateSessionRequest)

// WithSessionID asks for a session id of the caller's choosing; creating a session
// whose id exists fails with ErrSessionExists.
func WithSessionID(id string) SessionOption {
	return func(r *pb.CreateSessionRequest) { r.SessionId = id }
}

// WithLabels stores free-form labels with the session.
func WithLabels(labels map[string]string) SessionOption {
	return func(r *pb.CreateSessionRequest) { r.Labels = labels }
}

// CreateSession starts a conversation under an agent profile ("" means "default"). An
// unknown profile fails with ErrProfileNotFound.
func (c *Client) CreateSession(ctx context.Context, profile string, opts ...SessionOption) (*Session, error) {
	req := &pb.CreateSessionRequest{Profile: profile}
	for _, opt := range opts {
		opt(req)
	}
	resp, err := c.rpc.CreateSession(ctx, req)
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	return resp.GetSession(), nil
}

// GetSession returns a session with its turns. An unknown id fails with
// ErrSessionNotFound.
func (c *Client) GetSession(ctx context.Context, sessionID string) (*Session, error) {
	resp, err := c.rpc.GetSession(ctx, &pb.GetSessionRequest{SessionId: sessionID})
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	return resp.GetSession(), nil
}

// DeleteSession removes a session and its history, and reports whether one existed.
// Deleting an unknown session succeeds, so it is safe to retry.
func (c *Client) DeleteSession(ctx context.Context, sessionID string) (bool, error) {
	resp, err := c.rpc.DeleteSession(ctx, &pb.DeleteSessionRequest{SessionId: sessionID})
	if err != nil {
		return false, fromRPC(ctx, err)
	}
	return resp.GetDeleted(), nil
}

// ListSessionTools lists the tools the session's profile allows, with whether each can
// be called now.
func (c *Client) ListSessionTools(ctx context.Context, sessionID string) ([]*SessionTool, error) {
	resp, err := c.rpc.ListSessionTools(ctx, &pb.ListSessionToolsRequest{SessionId: sessionID})
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	return resp.GetTools(), nil
}

// Run runs one user turn and returns only its result. Nobody can approve a tool call
// during a unary run, so calls that need approval are denied (the model sees them
// denied); use Stream to approve them. A run that started and then failed (the model
// was unavailable, say) is not an error: its result's stop reason and error say why.
// A session already running a turn fails with ErrSessionBusy.
func (c *Client) Run(ctx context.Context, sessionID, input string, opts ...RunOption) (*RunResponse, error) {
	cfg := runConfig(opts)
	resp, err := c.rpc.Run(ctx, &pb.RunRequest{SessionId: sessionID, Input: input, OutputMode: cfg.mode})
	if err != nil {
		return nil, fromRPC(ctx, err)
	}
	return resp, nil
}

// Approve lets a tool call that waits for approval run. A call that no longer waits
// fails with ErrCallNotPending.
func (c *Client) Approve(ctx context.Context, sessionID, callID string) error {
	return c.decide(ctx, sessionID, callID, Decision{Approve: true})
}

// Deny refuses a tool call that waits for approval; the model sees it denied, with the
// reason (which may be empty). A call that no longer waits fails with ErrCallNotPending.
func (c *Client) Deny(ctx context.Context, sessionID, callID, reason string) error {
	return c.decide(ctx, sessionID, callID, Decision{Reason: reason})
}

func (c *Client) decide(ctx context.Context, sessionID, callID string, d Decision) error {
	decision := pb.ApprovalDecision_APPROVAL_DECISION_DENY
	if d.Approve {
		decision = pb.ApprovalDecision_APPROVAL_DECISION_APPROVE
	}
	_, err := c.rpc.ApproveToolCall(ctx, &pb.ApproveToolCallRequest{
		SessionId: sessionID, CallId: callID, Decision: decision, Reason: d.Reason,
	})
	return fromRPC(ctx, err)
}
