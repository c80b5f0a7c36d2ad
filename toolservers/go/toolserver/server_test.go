package toolserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
	"github.com/agent-sidecar/agent-sidecar/toolservers/go/toolserver"
)

const orderSchema = `{
  "type": "object",
  "properties": {
    "order_id": {"type": "string", "minLength": 4},
    "quantity": {"type": "integer", "minimum": 1}
  },
  "required": ["order_id"],
  "additionalProperties": false
}`

type order struct {
	OrderID  string `json:"order_id"`
	Quantity int    `json:"quantity"`
}

// served is a server running in this process and a connection to it.
type served struct {
	conn  *grpc.ClientConn
	tools pb.ToolServiceClient
	stop  context.CancelFunc
	done  chan error // Serve's result
}

// stopped waits up to timeout for Serve to return, and says whether it did.
func (s *served) stopped(timeout time.Duration) (bool, error) {
	select {
	case err := <-s.done:
		s.done <- err // keep it for the next look
		return true, err
	case <-time.After(timeout):
		return false, nil
	}
}

func serve(t *testing.T, grace time.Duration, tools ...toolserver.Tool) *served {
	t.Helper()
	server := toolserver.New("test")
	for _, tool := range tools {
		if err := server.Register(tool); err != nil {
			t.Fatalf("Register: %v", err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, lis, grace) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s := &served{conn: conn, tools: pb.NewToolServiceClient(conn), stop: stop, done: done}
	t.Cleanup(func() {
		stop()
		conn.Close()
		if ok, _ := s.stopped(30 * time.Second); !ok {
			t.Error("the server did not stop")
		}
	})
	return s
}

func callContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func orderTool(calls *atomic.Int32) toolserver.Tool {
	return toolserver.Tool{
		Name:        "get_order",
		Description: "Look up an order.",
		InputSchema: orderSchema,
		ReadOnly:    true,
		Idempotent:  true,
		Handler: toolserver.Typed(func(_ context.Context, in order) (map[string]any, error) {
			calls.Add(1)
			if in.OrderID == "0000" {
				return nil, toolserver.Fail("order %s does not exist", in.OrderID)
			}
			return map[string]any{"order_id": in.OrderID, "status": "shipped"}, nil
		}),
	}
}

func TestArgumentsThatBreakTheSchemaAreAToolErrorAndTheHandlerNeverRuns(t *testing.T) {
	var calls atomic.Int32
	s := serve(t, time.Second, orderTool(&calls))

	resp, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{
		CallId: "c1", ToolName: "get_order", Arguments: `{"quantity": 0, "colour": "red"}`,
	})

	if err != nil {
		t.Fatalf("CallTool failed with a status: %v", err)
	}
	result := resp.GetResult()
	if result.GetCallId() != "c1" || result.GetError().GetKind() != pb.ToolErrorKind_TOOL_ERROR_KIND_INVALID_ARGUMENTS {
		t.Fatalf("result %v, want an INVALID_ARGUMENTS error for c1", result)
	}
	message := result.GetError().GetMessage()
	for _, want := range []string{
		"order_id: required argument is missing",
		"quantity: ",
		"colour: unknown argument",
		"Call get_order again",
	} {
		if !strings.Contains(message, want) {
			t.Errorf("message lacks %q:\n%s", want, message)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("the handler ran %d times", calls.Load())
	}
	if result.GetHandlerDuration() == nil {
		t.Error("no handler_duration")
	}
}

func TestAValidCallReturnsTheHandlersOutputAsJSON(t *testing.T) {
	var calls atomic.Int32
	s := serve(t, time.Second, orderTool(&calls))

	resp, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{ToolName: "get_order", Arguments: `{"order_id": "20250101"}`})

	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(resp.GetResult().GetOutput()), &out); err != nil || out["status"] != "shipped" {
		t.Fatalf("output %q: %v", resp.GetResult().GetOutput(), err)
	}
}

func TestAFailureTheToolReportsIsDataWithItsMessage(t *testing.T) {
	var calls atomic.Int32
	s := serve(t, time.Second, orderTool(&calls))

	resp, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{ToolName: "get_order", Arguments: `{"order_id": "0000"}`})

	if err != nil {
		t.Fatal(err)
	}
	e := resp.GetResult().GetError()
	if e.GetKind() != pb.ToolErrorKind_TOOL_ERROR_KIND_EXECUTION_FAILED || e.GetMessage() != "order 0000 does not exist" {
		t.Fatalf("error %v", e)
	}
}

func TestAnUnknownToolIsNotFoundListingTheToolsOffered(t *testing.T) {
	var calls atomic.Int32
	s := serve(t, time.Second, orderTool(&calls))

	_, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{ToolName: "get_parcel", Arguments: "{}"})

	if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), "get_order") {
		t.Fatalf("got %v, want NOT_FOUND naming get_order", err)
	}
}

func TestArgumentsThatAreNoJSONObjectAreInvalidArgument(t *testing.T) {
	var calls atomic.Int32
	s := serve(t, time.Second, orderTool(&calls))

	for _, args := range []string{`[1]`, `null`, `{"order_id": `, `{} {}`} {
		_, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{ToolName: "get_order", Arguments: args})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("arguments %s: got %v, want INVALID_ARGUMENT", args, err)
		}
	}
	_, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{Arguments: "{}"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("an empty tool name: got %v", err)
	}
}

func TestIntegersBeyondFloatPrecisionReachTheHandlerExactly(t *testing.T) {
	echo := toolserver.Tool{
		Name: "echo", Description: "Echo the number.",
		InputSchema: `{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}`,
		Handler: func(_ context.Context, call *toolserver.Call) (any, error) {
			var in struct{ N json.Number }
			if err := call.Bind(&in); err != nil {
				return nil, err
			}
			return in.N.String(), nil
		},
	}
	s := serve(t, time.Second, echo)

	resp, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{ToolName: "echo", Arguments: `{"n": 12345678901234567891}`})

	if err != nil || resp.GetResult().GetOutput() != "12345678901234567891" {
		t.Fatalf("output %v, err %v", resp.GetResult(), err)
	}
}

func TestStreamToolSendsProgressThenExactlyOneResult(t *testing.T) {
	export := toolserver.Tool{
		Name: "export", Description: "Export rows.",
		Handler: func(_ context.Context, call *toolserver.Call) (any, error) {
			for done := range 3 {
				if err := call.Progress(float64(done), 3, "rows"); err != nil {
					return nil, err
				}
			}
			return "exported 3 rows", nil
		},
	}
	s := serve(t, time.Second, export)

	stream, err := s.tools.StreamTool(callContext(t), &pb.StreamToolRequest{Call: &pb.CallToolRequest{ToolName: "export"}})
	if err != nil {
		t.Fatal(err)
	}
	var progress []float64
	var results []*pb.ToolResult
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if p := msg.GetProgress(); p != nil {
			progress = append(progress, p.GetProgress())
		}
		if r := msg.GetResult(); r != nil {
			results = append(results, r)
		}
	}
	if len(progress) != 3 || progress[2] != 2 || len(results) != 1 || results[0].GetOutput() != "exported 3 rows" {
		t.Fatalf("progress %v, results %v", progress, results)
	}
}

func TestADeadlineStopsACallWhoseHandlerIgnoresIt(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	stuck := toolserver.Tool{
		Name: "stuck", Description: "Never finishes in time.",
		Handler: func(context.Context, *toolserver.Call) (any, error) {
			<-release // ignores ctx on purpose
			return "late", nil
		},
	}
	s := serve(t, time.Second, stuck)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()

	_, err := s.tools.CallTool(ctx, &pb.CallToolRequest{ToolName: "stuck"})

	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DEADLINE_EXCEEDED", err)
	}
}

func TestHealthIsServingForBothNamesAndReflectionListsTheServices(t *testing.T) {
	var calls atomic.Int32
	s := serve(t, time.Second, orderTool(&calls))
	health := healthpb.NewHealthClient(s.conn)

	for _, name := range []string{"", toolserver.ServiceName} {
		resp, err := health.Check(callContext(t), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v", name, resp, err)
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(callContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	for _, want := range []string{toolserver.ServiceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection lists %v, not %s", names, want)
		}
	}
}

func TestDrainingTurnsHealthNotServingFirstAndLetsRunningCallsFinish(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	slow := toolserver.Tool{
		Name: "slow", Description: "Finishes when released.",
		Handler: func(context.Context, *toolserver.Call) (any, error) {
			close(entered)
			<-release
			return "finished", nil
		},
	}
	s := serve(t, time.Minute, slow)
	ctx := callContext(t)
	watch, err := healthpb.NewHealthClient(s.conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: toolserver.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", first, err)
	}
	type outcome struct {
		resp *pb.CallToolResponse
		err  error
	}
	running := make(chan outcome, 1)
	go func() {
		resp, err := s.tools.CallTool(ctx, &pb.CallToolRequest{ToolName: "slow"})
		running <- outcome{resp, err}
	}()
	<-entered

	s.stop() // what SIGTERM does in Main

	if next, err := watch.Recv(); err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after the stop, watch got %v %v, want NOT_SERVING", next, err)
	}
	if end, err := watch.Recv(); err != io.EOF {
		t.Errorf("after NOT_SERVING, watch got %v %v, want its end", end, err)
	}
	if _, err := s.tools.CallTool(ctx, &pb.CallToolRequest{ToolName: "slow"}); status.Code(err) != codes.Unavailable {
		t.Errorf("a new call while draining: %v, want UNAVAILABLE", err)
	}
	if ok, _ := s.stopped(0); ok {
		t.Fatal("the server stopped while a call was running")
	}
	close(release)
	got := <-running
	if got.err != nil || got.resp.GetResult().GetOutput() != "finished" {
		t.Fatalf("the running call: %v %v", got.resp, got.err)
	}
	// The watch stream is still open; the server stops anyway, long before the grace
	// period (a minute) would have passed.
	ok, err := s.stopped(10 * time.Second)
	if !ok || err != nil {
		t.Fatalf("the server did not stop once its calls had finished (%v)", err)
	}
}

func TestACallThatOutlastsTheGracePeriodIsCancelled(t *testing.T) {
	entered := make(chan struct{})
	cancelled := make(chan struct{})
	slow := toolserver.Tool{
		Name: "forever", Description: "Runs until cancelled.",
		Handler: func(ctx context.Context, _ *toolserver.Call) (any, error) {
			close(entered)
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		},
	}
	s := serve(t, 100*time.Millisecond, slow)
	errs := make(chan error, 1)
	go func() {
		_, err := s.tools.CallTool(callContext(t), &pb.CallToolRequest{ToolName: "forever"})
		errs <- err
	}()
	<-entered

	s.stop()

	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was never cancelled")
	}
	if err := <-errs; status.Code(err) == codes.OK {
		t.Fatalf("the cut call succeeded")
	}
}

func TestToolsDeclaredWronglyAreRefusedWithAHint(t *testing.T) {
	handler := func(context.Context, *toolserver.Call) (any, error) { return "", nil }
	cases := map[string]toolserver.Tool{
		"a name is 1 to 64":          {Name: "has space", Description: "d", Handler: handler},
		"needs a description":        {Name: "t", Handler: handler},
		"no Handler":                 {Name: "t", Description: "d"},
		"root must be an object":     {Name: "t", Description: "d", Handler: handler, InputSchema: `{"type": "string"}`},
		"not valid JSON":             {Name: "t", Description: "d", Handler: handler, InputSchema: `{"type": `},
		"only read-only tools":       {Name: "t", Description: "d", Handler: handler, CacheTTL: time.Second},
		"cannot be Destructive":      {Name: "t", Description: "d", Handler: handler, ReadOnly: true, Destructive: true},
		"no top-level property":      {Name: "t", Description: "d", Handler: handler, InputSchema: orderSchema, WriteKeys: []string{"order:{id}"}},
		"must be self-contained":     {Name: "t", Description: "d", Handler: handler, InputSchema: `{"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}`},
		"registered already; pick a": {Name: "dup", Description: "d", Handler: handler},
	}
	for want, tool := range cases {
		server := toolserver.New("test")
		server.MustRegister(toolserver.Tool{Name: "dup", Description: "d", Handler: handler})
		err := server.Register(tool)
		var def *toolserver.DefinitionError
		if !errors.As(err, &def) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
