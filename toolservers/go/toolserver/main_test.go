package toolserver_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
	"github.com/agent-sidecar/agent-sidecar/toolservers/go/toolserver"
)

// childEnv makes the test binary a tool server (Server.Main) instead of running tests:
// TestMain sees it before the test flags are parsed, so Main reads the child's flags.
const childEnv = "TOOLSERVER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		childServer()
		return
	}
	os.Exit(m.Run())
}

// childServer offers "hold": it reports progress once, then returns when a line arrives
// on stdin.
func childServer() {
	lines := bufio.NewScanner(os.Stdin)
	server := toolserver.New("child")
	server.MustRegister(toolserver.Tool{
		Name: "hold", Description: "Returns when released.",
		Handler: func(_ context.Context, call *toolserver.Call) (any, error) {
			if err := call.Progress(0, 1, "started"); err != nil {
				return nil, err
			}
			lines.Scan()
			return "released", nil
		},
	})
	server.Main()
}

func TestSigtermDrainsAndExitsZeroAfterTheRunningCallFinishes(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--port", "0", "--grace", "1m", "--log-level", "warn")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	announced := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		announced <- line
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	var address string
	select {
	case line := <-announced:
		var found bool
		if address, found = strings.CutPrefix(strings.TrimSpace(line), "listening on "); !found {
			t.Fatalf("the first line is %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no listening line")
	}
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := callContext(t)
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := watch.Recv(); err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", first, err)
	}
	call, err := pb.NewToolServiceClient(conn).StreamTool(ctx, &pb.StreamToolRequest{Call: &pb.CallToolRequest{ToolName: "hold"}})
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := call.Recv(); err != nil || msg.GetProgress() == nil {
		t.Fatalf("the call did not start: %v %v", msg, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	if next, err := watch.Recv(); err != nil || next.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after SIGTERM, watch got %v %v, want NOT_SERVING", next, err)
	}
	if _, err := io.WriteString(stdin, "release\n"); err != nil {
		t.Fatal(err)
	}
	msg, err := call.Recv()
	if err != nil || msg.GetResult().GetOutput() != "released" {
		t.Fatalf("the running call: %v %v", msg, err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the server exited with %v, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit once its call had finished (its grace is a minute)")
	}
}
