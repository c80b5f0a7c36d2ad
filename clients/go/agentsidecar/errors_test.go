package agentsidecar

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The sidecar's details, as they arrive in grpc-status-details-bin, become fields.
func TestErrorReadsEveryDetailOfTheStatus(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, "session s1 is already running a turn").WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonSessionBusy, Domain: Domain, Metadata: map[string]string{"session_id": "s1"}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(250 * time.Millisecond)},
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: "input", Description: "must not be empty", Reason: "EMPTY"},
		}},
		&errdetails.ResourceInfo{ResourceType: "session", ResourceName: "s1"},
	)
	if err != nil {
		t.Fatal(err)
	}

	got := fromRPC(context.Background(), st.Err())

	var e *Error
	if !errors.As(got, &e) {
		t.Fatalf("fromRPC returned %T", got)
	}
	if e.Code != codes.FailedPrecondition || e.Reason != ReasonSessionBusy || e.Domain != Domain ||
		e.Metadata["session_id"] != "s1" {
		t.Errorf("code/reason/domain/metadata: %v %q %q %v", e.Code, e.Reason, e.Domain, e.Metadata)
	}
	if delay, ok := RetryDelay(got); !ok || delay != 250*time.Millisecond || !IsRetryable(got) {
		t.Errorf("retry delay %v %v, retryable %v", delay, ok, IsRetryable(got))
	}
	if len(e.FieldViolations) != 1 || e.FieldViolations[0] != (FieldViolation{"input", "must not be empty", "EMPTY"}) {
		t.Errorf("field violations %v", e.FieldViolations)
	}
	if e.Resource == nil || e.Resource.Type != "session" || e.Resource.Name != "s1" {
		t.Errorf("resource %v", e.Resource)
	}
	if !errors.Is(got, ErrSessionBusy) || errors.Is(got, ErrSessionNotFound) || errors.Is(got, context.Canceled) {
		t.Errorf("errors.Is matched the wrong sentinels: %v", got)
	}
	if status.Code(got) != codes.FailedPrecondition || Reason(got) != ReasonSessionBusy {
		t.Errorf("status.Code %v, Reason %q", status.Code(got), Reason(got))
	}
}

func TestAReasonFromAnotherDomainMatchesNoSentinel(t *testing.T) {
	st, _ := status.New(codes.NotFound, "x").WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonSessionNotFound, Domain: "example.com"})

	if errors.Is(fromRPC(context.Background(), st.Err()), ErrSessionNotFound) {
		t.Error("matched a reason of another domain")
	}
}

func TestAStatusWithoutDetailsFallsBackToItsCode(t *testing.T) {
	unavailable := fromRPC(context.Background(), status.Error(codes.Unavailable, "draining"))
	notFound := fromRPC(context.Background(), status.Error(codes.NotFound, "no session"))

	if !IsRetryable(unavailable) || IsRetryable(notFound) {
		t.Errorf("retryable: UNAVAILABLE %v, NOT_FOUND %v", IsRetryable(unavailable), IsRetryable(notFound))
	}
	if Reason(notFound) != "" || errors.Is(notFound, ErrSessionNotFound) {
		t.Errorf("a status without ErrorInfo has reason %q", Reason(notFound))
	}
}
