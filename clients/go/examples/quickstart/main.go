// Quickstart: one streamed turn and one unary turn against a running sidecar.
//
//	go run ./examples/quickstart -addr 127.0.0.1:50051
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecar"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "the sidecar's host:port")
	profile := flag.String("profile", "default", "the agent profile of the session")
	question := flag.String("q", "What is the status of order 20250101, and where is its parcel?", "the first turn")
	flag.Parse()
	if err := run(*addr, *profile, *question); err != nil {
		log.Fatal(err)
	}
}

func run(addr, profile, question string) error {
	client, err := agentsidecar.Dial(addr)
	if err != nil {
		return err
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session, err := client.CreateSession(ctx, profile)
	if errors.Is(err, agentsidecar.ErrProfileNotFound) {
		return fmt.Errorf("the sidecar has no profile %q", profile)
	}
	if err != nil {
		return err
	}
	id := session.GetSessionId()
	defer client.DeleteSession(context.Background(), id)

	// Tool calls that need approval are put to this callback; here, on the terminal.
	approver := func(_ context.Context, call *agentsidecar.ApprovalRequired) (agentsidecar.Decision, error) {
		fmt.Printf("approve %s(%s)? approving\n", call.GetToolName(), call.GetArguments())
		return agentsidecar.Decision{Approve: true}, nil
	}
	fmt.Println("==", question)
	for event, err := range client.Stream(ctx, id, question, agentsidecar.WithApprover(approver)) {
		if err != nil {
			return err
		}
		switch {
		case event.GetToolCallStarted() != nil:
			call := event.GetToolCallStarted()
			fmt.Printf("  -> %s(%s)\n", call.GetToolName(), call.GetArguments())
		case event.GetToolCallFinished() != nil:
			call := event.GetToolCallFinished()
			fmt.Printf("  <- %s: %s in %s\n", call.GetToolName(), call.GetStatus(), call.GetDuration().AsDuration())
		case event.GetTextDelta() != nil:
			fmt.Print(event.GetTextDelta().GetText())
		case event.GetRunFinished() != nil:
			result := event.GetRunFinished()
			fmt.Printf("\n  %s after %d steps, %d tool calls, %s\n", result.GetStopReason(),
				result.GetSteps(), result.GetToolCalls(), result.GetTimeline().GetTotal().AsDuration())
		}
	}

	resp, err := client.Run(ctx, id, "And when will it arrive?")
	if err != nil {
		return err
	}
	fmt.Println("== unary:", resp.GetResult().GetAnswer())
	return nil
}
