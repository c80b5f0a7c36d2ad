package agentsidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every error the sidecar reports.
const Domain = "agentsidecar.v1"

// The sidecar's error reasons: stable, documented values of ErrorInfo.reason. Branch on
// these (through the Err* sentinels and errors.Is), never on message text.
const (
	ReasonSessionNotFound  = "SESSION_NOT_FOUND" // NOT_FOUND
	ReasonProfileNotFound  = "PROFILE_NOT_FOUND" // NOT_FOUND
	ReasonCallNotPending   = "CALL_NOT_PENDING"  // NOT_FOUND: no such call waits for approval
	ReasonSessionExists    = "SESSION_EXISTS"    // ALREADY_EXISTS
	ReasonSessionBusy      = "SESSION_BUSY"      // FAILED_PRECONDITION, with a retry delay
	ReasonProfileRemoved   = "PROFILE_REMOVED"   // FAILED_PRECONDITION
	ReasonInvalidRequest   = "INVALID_REQUEST"   // INVALID_ARGUMENT, with field violations
	ReasonInputTooLarge    = "INPUT_TOO_LARGE"   // INVALID_ARGUMENT
	ReasonDraining         = "DRAINING"          // UNAVAILABLE, with a retry delay
	ReasonOverloaded       = "OVERLOADED"        // RESOURCE_EXHAUSTED, with a retry delay
	ReasonQuotaExceeded    = "QUOTA_EXCEEDED"    // RESOURCE_EXHAUSTED, with a retry delay
	ReasonUnauthenticated  = "UNAUTHENTICATED"   // UNAUTHENTICATED
	ReasonPermissionDenied = "PERMISSION_DENIED" // PERMISSION_DENIED
	ReasonInternal         = "INTERNAL"          // INTERNAL; Metadata["error_id"] names the log line

	ReasonRunNotFound            = "RUN_NOT_FOUND"            // NOT_FOUND: no such background run
	ReasonRunQueueFull           = "RUN_QUEUE_FULL"           // RESOURCE_EXHAUSTED, with a retry delay
	ReasonCallbackNotAllowed     = "CALLBACK_NOT_ALLOWED"     // PERMISSION_DENIED
	ReasonBackgroundRunsDisabled = "BACKGROUND_RUNS_DISABLED" // FAILED_PRECONDITION
	ReasonRequestIDReused        = "REQUEST_ID_REUSED"        // ALREADY_EXISTS: StartRun's key, another request
)

// Sentinels for errors.Is: an *Error matches one when their reasons (and domains) are
// equal, whatever the message says.
//
//	if errors.Is(err, agentsidecar.ErrSessionNotFound) { ... }
var (
	ErrSessionNotFound  = sentinel(codes.NotFound, ReasonSessionNotFound)
	ErrProfileNotFound  = sentinel(codes.NotFound, ReasonProfileNotFound)
	ErrCallNotPending   = sentinel(codes.NotFound, ReasonCallNotPending)
	ErrSessionExists    = sentinel(codes.AlreadyExists, ReasonSessionExists)
	ErrSessionBusy      = sentinel(codes.FailedPrecondition, ReasonSessionBusy)
	ErrProfileRemoved   = sentinel(codes.FailedPrecondition, ReasonProfileRemoved)
	ErrInvalidRequest   = sentinel(codes.InvalidArgument, ReasonInvalidRequest)
	ErrInputTooLarge    = sentinel(codes.InvalidArgument, ReasonInputTooLarge)
	ErrDraining         = sentinel(codes.Unavailable, ReasonDraining)
	ErrOverloaded       = sentinel(codes.ResourceExhausted, ReasonOverloaded)
	ErrQuotaExceeded    = sentinel(codes.ResourceExhausted, ReasonQuotaExceeded)
	ErrUnauthenticated  = sentinel(codes.Unauthenticated, ReasonUnauthenticated)
	ErrPermissionDenied = sentinel(codes.PermissionDenied, ReasonPermissionDenied)
	ErrInternal         = sentinel(codes.Internal, ReasonInternal)

	ErrRunNotFound            = sentinel(codes.NotFound, ReasonRunNotFound)
	ErrRunQueueFull           = sentinel(codes.ResourceExhausted, ReasonRunQueueFull)
	ErrCallbackNotAllowed     = sentinel(codes.PermissionDenied, ReasonCallbackNotAllowed)
	ErrBackgroundRunsDisabled = sentinel(codes.FailedPrecondition, ReasonBackgroundRunsDisabled)
)

func sentinel(code codes.Code, reason string) *Error {
	return &Error{Code: code, Reason: reason, Domain: Domain, Message: "agentsidecar: " + reason}
}

// Error is a failed call to the sidecar: its gRPC status with the google.rpc details the
// sidecar attaches (ErrorInfo, RetryInfo, BadRequest, ResourceInfo).
//
// Every method of Client returns its errors as *Error when the call reached gRPC.
// errors.As gets at the fields; errors.Is matches the Err* sentinels by reason. When the
// caller's own context ended the call (a deadline or a cancel), the error also matches
// context.DeadlineExceeded or context.Canceled. status.Code(err) and status.Convert(err)
// work on it as on any gRPC error.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Message is the status message, for people; never branch on it.
	Message string
	// Reason is ErrorInfo.reason (one of the Reason* constants); empty when the status
	// carried no ErrorInfo (an older sidecar, or a failure before the sidecar answered:
	// an unreachable address, a deadline that passed in the client).
	Reason string
	// Domain is ErrorInfo.domain: Domain for the sidecar's own errors.
	Domain string
	// Metadata is ErrorInfo.metadata (for INTERNAL, "error_id" names the sidecar's log
	// line); nil when absent.
	Metadata map[string]string
	// RetryDelay is RetryInfo.retry_delay: how long to wait before retrying. Valid only
	// when HasRetryDelay is true.
	RetryDelay time.Duration
	// HasRetryDelay is true when the status carried a RetryInfo.
	HasRetryDelay bool
	// FieldViolations lists BadRequest's field violations: what was wrong with the
	// request, field by field.
	FieldViolations []FieldViolation
	// Resource is ResourceInfo, the resource the error is about (the missing session,
	// say); nil when absent.
	Resource *Resource

	status *status.Status
	causes []error
}

// FieldViolation is one bad field of a request (google.rpc.BadRequest.FieldViolation).
type FieldViolation struct {
	// Field is the path of the field, such as "input" or "session_id".
	Field string
	// Description says what is wrong with it.
	Description string
	// Reason is a machine-readable cause; may be empty.
	Reason string
}

// Resource names the resource an error is about (google.rpc.ResourceInfo).
type Resource struct {
	Type        string
	Name        string
	Owner       string
	Description string
}

// Error reads "agentsidecar: REASON (Code): message", without the reason when there
// is none.
func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("agentsidecar: %s (%s): %s", e.Reason, e.Code, e.Message)
	}
	return fmt.Sprintf("agentsidecar: %s: %s", e.Code, e.Message)
}

// Is reports whether target is an *Error with the same reason and domain: the Err*
// sentinels match any error the sidecar reports with their reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Reason == "" {
		return false
	}
	return t.Reason == e.Reason && (t.Domain == "" || t.Domain == e.Domain)
}

// Unwrap returns the caller's context error (context.Canceled or
// context.DeadlineExceeded, and the context's cause when it has one) when the caller's
// context ended the call; nil otherwise.
func (e *Error) Unwrap() []error { return e.causes }

// GRPCStatus returns the status the error was read from, so that status.Code and
// status.Convert see through it.
func (e *Error) GRPCStatus() *status.Status {
	if e.status == nil {
		return status.New(e.Code, e.Message)
	}
	return e.status
}

// IsRetryable reports whether the same call may succeed if sent again later: the sidecar
// attached a retry delay (DRAINING, OVERLOADED, QUOTA_EXCEEDED, SESSION_BUSY,
// RUN_QUEUE_FULL), or, for a
// status without details, its code is UNAVAILABLE or RESOURCE_EXHAUSTED. Calls the
// caller's own context ended are not retryable; errors that are not *Error neither.
// Wait RetryDelay (see RetryDelay) before retrying.
func IsRetryable(err error) bool {
	var e *Error
	if !errors.As(err, &e) || len(e.causes) > 0 {
		return false
	}
	if e.HasRetryDelay {
		return true
	}
	switch e.Reason {
	case ReasonDraining, ReasonOverloaded, ReasonQuotaExceeded, ReasonSessionBusy, ReasonRunQueueFull:
		return true
	case "":
		return e.Code == codes.Unavailable || e.Code == codes.ResourceExhausted
	}
	return false
}

// RetryDelay returns the delay the sidecar asked for before a retry, and whether it
// asked for one.
func RetryDelay(err error) (time.Duration, bool) {
	var e *Error
	if !errors.As(err, &e) || !e.HasRetryDelay {
		return 0, false
	}
	return e.RetryDelay, true
}

// Reason returns the error's ErrorInfo reason, or "" when err is not an *Error or
// carried none.
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// fromRPC turns a gRPC error into an *Error; ctx is the call's context, which tells a
// call the caller ended from one the sidecar failed.
func fromRPC(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			e.Reason, e.Domain, e.Metadata = d.GetReason(), d.GetDomain(), d.GetMetadata()
		case *errdetails.RetryInfo:
			e.RetryDelay, e.HasRetryDelay = d.GetRetryDelay().AsDuration(), true
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.FieldViolations = append(e.FieldViolations, FieldViolation{
					Field: v.GetField(), Description: v.GetDescription(), Reason: v.GetReason(),
				})
			}
		case *errdetails.ResourceInfo:
			e.Resource = &Resource{
				Type: d.GetResourceType(), Name: d.GetResourceName(),
				Owner: d.GetOwner(), Description: d.GetDescription(),
			}
		}
	}
	if ctxErr := ctx.Err(); ctxErr != nil && (e.Code == codes.Canceled || e.Code == codes.DeadlineExceeded) {
		e.causes = append(e.causes, ctxErr)
		if cause := context.Cause(ctx); cause != nil && cause != ctxErr {
			e.causes = append(e.causes, cause)
		}
	}
	return e
}
