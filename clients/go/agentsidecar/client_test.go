package agentsidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecar"
	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// The launcher's simulator: this question makes two parallel tool calls, then answers.
const orderQuestion = "What is the status of order 20250101, and where is its parcel?"

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newSession(t *testing.T, ctx context.Context, profile string) string {
	t.Helper()
	session, err := client.CreateSession(ctx, profile)
	if err != nil {
		t.Fatalf("CreateSession(%q): %v", profile, err)
	}
	t.Cleanup(func() {
		if _, err := client.DeleteSession(context.Background(), session.GetSessionId()); err != nil {
			t.Errorf("DeleteSession: %v", err)
		}
	})
	return session.GetSessionId()
}

func collect(t *testing.T, events func(func(*agentsidecar.Event, error) bool)) []*agentsidecar.Event {
	t.Helper()
	var all []*agentsidecar.Event
	for event, err := range events {
		if err != nil {
			t.Fatalf("stream failed after %d events: %v", len(all), err)
		}
		all = append(all, event)
	}
	return all
}

func TestStreamedRunCallsToolsAndEndsWithRunFinished(t *testing.T) {
	ctx := testContext(t)
	id := newSession(t, ctx, "default")

	events := collect(t, client.Stream(ctx, id, orderQuestion))

	if len(events) < 2 || events[0].GetRunStarted() == nil {
		t.Fatalf("the first event is not run_started: %v", events)
	}
	finished := map[string]pb.ToolCallStatus{}
	for i, event := range events {
		if event.GetSequence() != uint32(i+1) {
			t.Errorf("event %d has sequence %d", i, event.GetSequence())
		}
		if call := event.GetToolCallFinished(); call != nil {
			finished[call.GetToolName()] = call.GetStatus()
		}
		if event.GetRunFinished() != nil && i != len(events)-1 {
			t.Errorf("run_finished is event %d of %d", i+1, len(events))
		}
	}
	for _, tool := range []string{"get_order_status", "track_parcel"} {
		if finished[tool] != pb.ToolCallStatus_TOOL_CALL_STATUS_OK {
			t.Errorf("%s finished %v, want OK (finished: %v)", tool, finished[tool], finished)
		}
	}
	result := events[len(events)-1].GetRunFinished()
	if result == nil {
		t.Fatalf("the last event is not run_finished: %v", events[len(events)-1])
	}
	if result.GetStopReason() != pb.StopReason_STOP_REASON_ANSWERED || !strings.HasPrefix(result.GetAnswer(), "[simulated]") {
		t.Errorf("result %v: %q, want ANSWERED with a [simulated] answer", result.GetStopReason(), result.GetAnswer())
	}
}

func TestUnaryStructuredRunAnswersJSON(t *testing.T) {
	ctx := testContext(t)
	id := newSession(t, ctx, "structured")

	resp, err := client.Run(ctx, id, "What is the status of order 20250101?",
		agentsidecar.WithOutputMode(agentsidecar.Structured))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}

	result := resp.GetResult()
	if result.GetStopReason() != pb.StopReason_STOP_REASON_ANSWERED {
		t.Fatalf("stop reason %v (%v)", result.GetStopReason(), result.GetError())
	}
	var answer struct {
		Answer *string `json:"answer"`
	}
	if err := json.Unmarshal([]byte(result.GetAnswer()), &answer); err != nil || answer.Answer == nil {
		t.Fatalf("answer %q is not a JSON object with an answer: %v", result.GetAnswer(), err)
	}
	if resp.GetRunId() == "" {
		t.Error("the response has no run id")
	}
}

func TestDeadlineShorterThanTheAnswerEndsTheRunInTime(t *testing.T) {
	id := newSession(t, testContext(t), "default")
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // the answer takes 3 s
	defer cancel()

	resp, err := client.Run(ctx, id, "Give me a slow answer")

	// The sidecar keeps a little of the caller's deadline back to deliver the result in:
	// the run stops BUDGET_EXHAUSTED. Only when that margin is lost on the way (a loaded
	// machine) does the deadline itself end the call, as DeadlineExceeded.
	if err != nil {
		assertDeadlineExceeded(t, err)
		return
	}
	result := resp.GetResult()
	if result.GetStopReason() != pb.StopReason_STOP_REASON_BUDGET_EXHAUSTED || result.GetAnswer() != "" {
		t.Fatalf("Run returned %v with answer %q, want BUDGET_EXHAUSTED without one", result.GetStopReason(), result.GetAnswer())
	}
}

func TestDeadlinePassedInTheClientIsDeadlineExceeded(t *testing.T) {
	id := newSession(t, testContext(t), "default")
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()

	_, err := client.Run(ctx, id, "Give me a slow answer")

	assertDeadlineExceeded(t, err)
	var yielded []error
	for event, err := range client.Stream(ctx, id, "Give me a slow answer") {
		if event != nil {
			t.Fatalf("the stream yielded an event: %v", event)
		}
		yielded = append(yielded, err)
	}
	if len(yielded) != 1 {
		t.Fatalf("the stream yielded %v, want one error", yielded)
	}
	assertDeadlineExceeded(t, yielded[0])
}

func assertDeadlineExceeded(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	var e *agentsidecar.Error
	if !errors.As(err, &e) || e.Code != codes.DeadlineExceeded || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %#v, want an *Error with DeadlineExceeded", err)
	}
	if agentsidecar.IsRetryable(err) {
		t.Error("a deadline the caller set is reported retryable")
	}
}

func TestUnknownSessionIsReadByItsReason(t *testing.T) {
	ctx := testContext(t)

	_, err := client.GetSession(ctx, "no-such-session")

	var e *agentsidecar.Error
	if !errors.As(err, &e) || e.Code != codes.NotFound {
		t.Fatalf("GetSession returned %v, want an *Error with NotFound", err)
	}
	if !errors.Is(err, agentsidecar.ErrSessionNotFound) {
		t.Fatalf("GetSession returned %v (reason %q, domain %q), want reason %s",
			err, e.Reason, e.Domain, agentsidecar.ReasonSessionNotFound)
	}
	if errors.Is(err, agentsidecar.ErrProfileNotFound) || agentsidecar.IsRetryable(err) {
		t.Errorf("%v matches another reason or is retryable", err)
	}
}

func TestApprovalCallbackLetsTheToolRun(t *testing.T) {
	ctx := testContext(t)
	id := newSession(t, ctx, "default")
	var asked []*agentsidecar.ApprovalRequired
	approver := func(_ context.Context, call *agentsidecar.ApprovalRequired) (agentsidecar.Decision, error) {
		asked = append(asked, call)
		return agentsidecar.Decision{Approve: true}, nil
	}

	events := collect(t, client.Stream(ctx, id, "Please refund order 20250101", agentsidecar.WithApprover(approver)))

	if len(asked) != 1 || asked[0].GetToolName() != "refund_order" {
		t.Fatalf("the approver was asked %v, want refund_order once", asked)
	}
	approvedAt, finishedAt := -1, -1
	for i, event := range events {
		if call := event.GetApprovalRequired(); call != nil && call.GetCallId() == asked[0].GetCallId() {
			approvedAt = i
		}
		if call := event.GetToolCallFinished(); call != nil && call.GetCallId() == asked[0].GetCallId() {
			finishedAt = i
			if call.GetStatus() != pb.ToolCallStatus_TOOL_CALL_STATUS_OK {
				t.Errorf("refund_order finished %v: %s", call.GetStatus(), call.GetContent())
			}
		}
	}
	if approvedAt < 0 || finishedAt < approvedAt {
		t.Fatalf("approval_required at %d, tool_call_finished at %d: want the call to finish after approval", approvedAt, finishedAt)
	}
	answer := events[len(events)-1].GetRunFinished().GetAnswer()
	if !strings.Contains(answer, "the refund was handled") {
		t.Errorf("answer %q", answer)
	}
}

func TestCancellingMidStreamEndsItAndFreesTheSession(t *testing.T) {
	testCtx := testContext(t)
	id := newSession(t, testCtx, "default")
	ctx, cancel := context.WithCancel(testCtx)
	defer cancel()

	var seen []*agentsidecar.Event
	var streamErr error
	for event, err := range client.Stream(ctx, id, "Give me a slow answer") {
		if err != nil {
			streamErr = err
			break
		}
		seen = append(seen, event)
		if event.GetRunStarted() != nil {
			cancel() // the model is still 3 s from its first token
		}
	}

	if len(seen) == 0 || seen[0].GetRunStarted() == nil {
		t.Fatalf("events before the cancel: %v", seen)
	}
	if !errors.Is(streamErr, context.Canceled) || status.Code(streamErr) != codes.Canceled {
		t.Fatalf("the stream ended with %v, want context.Canceled", streamErr)
	}
	for _, event := range seen {
		if event.GetRunFinished() != nil {
			t.Fatalf("the cancelled run finished: %v", event)
		}
	}
	waitForTurn(t, testCtx, id, pb.StopReason_STOP_REASON_CANCELLED)
	resp, err := client.Run(testCtx, id, "What is the status of order 20250101?")
	if err != nil {
		t.Fatalf("the next run after the cancel: %v", err)
	}
	if got := resp.GetResult().GetStopReason(); got != pb.StopReason_STOP_REASON_ANSWERED {
		t.Errorf("the next run stopped %v", got)
	}
}

// waitForTurn waits until the session's last turn ended with reason: the sidecar
// records a cancelled turn, and frees the session, once it has seen the cancel.
func waitForTurn(t *testing.T, ctx context.Context, id string, reason pb.StopReason) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		session, err := client.GetSession(ctx, id)
		if err != nil {
			t.Fatalf("GetSession: %v", err)
		}
		if turns := session.GetTurns(); len(turns) > 0 && turns[len(turns)-1].GetStopReason() == reason {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the session's last turn never ended %v: %v", reason, session.GetTurns())
		case <-tick.C:
		}
	}
}

func TestABackgroundRunIsWatchedAgainFromWhereTheWatcherLeftOff(t *testing.T) {
	ctx := testContext(t)
	id := newSession(t, ctx, "default")

	run, err := client.StartRun(ctx, id, orderQuestion)
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	if run.GetRunId() == "" || run.GetState() != agentsidecar.RunSubmitted {
		t.Fatalf("StartRun returned %v", run)
	}
	var seen []*agentsidecar.Event
	for event, err := range client.WatchRun(ctx, run.GetRunId(), 0) {
		if err != nil {
			t.Fatalf("first watch: %v", err)
		}
		seen = append(seen, event)
		if len(seen) == 2 {
			break // the watcher leaves; the run goes on
		}
	}
	seen = append(seen, collect(t, client.WatchRun(ctx, run.GetRunId(), seen[len(seen)-1].GetSequence()))...)
	for i, event := range seen {
		if event.GetSequence() != uint32(i+1) {
			t.Fatalf("event %d has sequence %d: an event missed or seen twice", i, event.GetSequence())
		}
	}
	last := seen[len(seen)-1].GetRunFinished()
	if last == nil || seen[0].GetRunStarted() == nil {
		t.Fatalf("events run from %v to %v", seen[0], seen[len(seen)-1])
	}
	got, err := client.GetRun(ctx, run.GetRunId())
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	if got.GetState() != agentsidecar.RunCompleted || got.GetResult().GetAnswer() != last.GetAnswer() ||
		!agentsidecar.RunFinished(got.GetState()) {
		t.Errorf("GetRun: %v %q, want completed with %q", got.GetState(), got.GetResult().GetAnswer(), last.GetAnswer())
	}
	runs, next, err := client.ListRuns(ctx, id, 0, "")
	if err != nil || next != "" || len(runs) != 1 || runs[0].GetRunId() != run.GetRunId() {
		t.Errorf("ListRuns: %v %q %v", runs, next, err)
	}
}

func TestStartRunWithARequestIDIsSafeToRetry(t *testing.T) {
	ctx := testContext(t)
	id := newSession(t, ctx, "default")
	key := agentsidecar.WithRequestID("go-" + id)
	first, err := client.StartRun(ctx, id, orderQuestion, key)
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	again, err := client.StartRun(ctx, id, orderQuestion, key) // its answer lost, say
	if err != nil || again.GetRunId() != first.GetRunId() || again.GetRequestId() != "go-"+id {
		t.Fatalf("StartRun again: %v %v, want run %s", again, err, first.GetRunId())
	}
	collect(t, client.WatchRun(ctx, first.GetRunId(), 0))
	runs, _, err := client.ListRuns(ctx, id, 0, "")
	if err != nil || len(runs) != 1 {
		t.Errorf("ListRuns: %v %v, want the one run", runs, err)
	}
}

func TestCancelRunStopsABackgroundRunAndIsSafeToRetry(t *testing.T) {
	ctx := testContext(t)
	id := newSession(t, ctx, "default")
	run, err := client.StartRun(ctx, id, "slow answer")
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}

	cancelled, err := client.CancelRun(ctx, run.GetRunId())
	if err != nil || cancelled.GetState() != agentsidecar.RunCanceled {
		t.Fatalf("CancelRun: %v %v", cancelled.GetState(), err)
	}
	again, err := client.CancelRun(ctx, run.GetRunId())
	if err != nil || again.GetState() != agentsidecar.RunCanceled {
		t.Errorf("CancelRun again: %v %v", again.GetState(), err)
	}
	if _, err := client.StartRun(ctx, id, "slow answer"); err != nil {
		t.Errorf("the session is not free after the cancel: %v", err)
	} else if runs, _, _ := client.ListRuns(ctx, id, 1, ""); len(runs) == 1 {
		_, _ = client.CancelRun(ctx, runs[0].GetRunId())
	}
}

func TestAnUnknownRunIsErrRunNotFoundForEveryCall(t *testing.T) {
	ctx := testContext(t)
	if _, err := client.GetRun(ctx, "no-such-run"); !errors.Is(err, agentsidecar.ErrRunNotFound) {
		t.Errorf("GetRun: %v", err)
	}
	if _, err := client.CancelRun(ctx, "no-such-run"); !errors.Is(err, agentsidecar.ErrRunNotFound) {
		t.Errorf("CancelRun: %v", err)
	}
	for _, err := range client.WatchRun(ctx, "no-such-run", 0) {
		if !errors.Is(err, agentsidecar.ErrRunNotFound) || agentsidecar.IsRetryable(err) {
			t.Errorf("WatchRun: %v", err)
		}
	}
}
