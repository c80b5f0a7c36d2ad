package toolserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// service implements agentsidecar.v1.ToolService over a frozen set of tools.
type service struct {
	pb.UnimplementedToolServiceServer
	tools    map[string]*registered
	names    []string
	list     *pb.ListToolsResponse
	inflight *inflight
	log      *slog.Logger
	verifier *verifier // nil: handlers read the plain identity
}

var errDraining = status.Error(codes.Unavailable, "the tool server is shutting down; retry on another instance")

func (s *service) ListTools(context.Context, *pb.ListToolsRequest) (*pb.ListToolsResponse, error) {
	return s.list, nil
}

func (s *service) CallTool(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	if !s.inflight.enter() {
		return nil, errDraining
	}
	defer s.inflight.leave()
	result, err := s.call(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	return &pb.CallToolResponse{Result: result}, nil
}

func (s *service) StreamTool(req *pb.StreamToolRequest, stream pb.ToolService_StreamToolServer) error {
	if !s.inflight.enter() {
		return errDraining
	}
	defer s.inflight.leave()
	// The handler may report progress from its own goroutine after the call is over
	// (it outlived its deadline): sends are serialised and refused once the call ends.
	var mu sync.Mutex
	over := false
	progress := func(p *pb.ToolProgress) error {
		mu.Lock()
		defer mu.Unlock()
		if over {
			return errors.New("toolserver: the call is over")
		}
		return stream.Send(&pb.StreamToolResponse{Event: &pb.StreamToolResponse_Progress{Progress: p}})
	}
	result, err := s.call(stream.Context(), req.GetCall(), progress)
	mu.Lock()
	defer mu.Unlock()
	over = true
	if err != nil {
		return err
	}
	return stream.Send(&pb.StreamToolResponse{Event: &pb.StreamToolResponse_Result{Result: result}})
}

// call runs one call: protocol failures are statuses, tool failures are results.
func (s *service) call(ctx context.Context, req *pb.CallToolRequest, progress func(*pb.ToolProgress) error) (*pb.ToolResult, error) {
	name := req.GetToolName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "tool_name is required")
	}
	tool := s.tools[name]
	if tool == nil {
		return nil, status.Errorf(codes.NotFound, "no tool %q; this server offers: %s", name, strings.Join(s.names, ", "))
	}
	var identity *Identity
	if s.verifier != nil {
		// Before anything of the request is looked at: a call that does not verify never
		// reaches the tool.
		id, err := s.verifier.verify(ctx, req.GetCallId())
		if err != nil {
			s.log.Warn("call refused", "tool", name, "call_id", truncate(req.GetCallId(), 64), "error", status.Convert(err).Message())
			return nil, err
		}
		identity = id
		ctx = context.WithValue(ctx, identityKey{}, id)
	}
	start := time.Now()
	text := req.GetArguments()
	if strings.TrimSpace(text) == "" {
		text = "{}"
	}
	args, err := jsonschema.UnmarshalJSON(strings.NewReader(text)) // numbers stay exact
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "arguments are not valid JSON: %v", err)
	}
	if _, ok := args.(map[string]any); !ok {
		return nil, status.Errorf(codes.InvalidArgument, "arguments must be a JSON object, got %s", jsonType(args))
	}
	result := &pb.ToolResult{CallId: req.GetCallId()}
	finish := func() (*pb.ToolResult, error) {
		result.HandlerDuration = durationpb.New(time.Since(start))
		return result, nil
	}
	if lines := tool.schema.violations(args); len(lines) > 0 {
		setError(result, pb.ToolErrorKind_TOOL_ERROR_KIND_INVALID_ARGUMENTS, invalidArgumentsMessage(name, lines))
		return finish()
	}
	call := &Call{ID: req.GetCallId(), Tool: name, Arguments: []byte(text), progress: progress, ctx: ctx, identity: identity}
	value, err := s.run(ctx, tool, call)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, status.FromContextError(ctxErr).Err()
	}
	var argErr *argumentError
	var failure *Failure
	switch {
	case errors.As(err, &argErr):
		setError(result, pb.ToolErrorKind_TOOL_ERROR_KIND_INVALID_ARGUMENTS, argErr.message)
	case errors.As(err, &failure):
		setError(result, pb.ToolErrorKind_TOOL_ERROR_KIND_EXECUTION_FAILED, failure.Message)
	case err != nil:
		setError(result, pb.ToolErrorKind_TOOL_ERROR_KIND_EXECUTION_FAILED, err.Error())
	default:
		output, err := encodeOutput(value)
		if err != nil {
			setError(result, pb.ToolErrorKind_TOOL_ERROR_KIND_EXECUTION_FAILED, err.Error())
		} else {
			result.Outcome = &pb.ToolResult_Output{Output: output}
		}
	}
	return finish()
}

// run calls the handler on its own goroutine, so that the call ends when its deadline
// passes or the caller cancels even if the handler does not watch ctx (its result is
// then dropped). A panic is a failure the model sees, logged with its stack.
func (s *service) run(ctx context.Context, tool *registered, call *Call) (any, error) {
	type outcome struct {
		value any
		err   error
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				s.log.Warn("tool panicked", "tool", call.Tool, "panic", p, "stack", string(debug.Stack()))
				done <- outcome{err: fmt.Errorf("the tool failed: %v", p)}
			}
		}()
		value, err := tool.Handler(ctx, call)
		done <- outcome{value, err}
	}()
	select {
	case o := <-done:
		return o.value, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func setError(result *pb.ToolResult, kind pb.ToolErrorKind, message string) {
	result.Outcome = &pb.ToolResult_Error{Error: &pb.ToolError{Kind: kind, Message: message}}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// inflight counts running tool calls and refuses new ones once draining starts.
type inflight struct {
	mu       sync.Mutex
	running  int
	draining bool
}

func (f *inflight) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining {
		return false
	}
	f.running++
	return true
}

func (f *inflight) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running--
}

// drain refuses new calls from now on.
func (f *inflight) drain() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.draining = true
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}
