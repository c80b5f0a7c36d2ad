package toolserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// Tool is one tool a server offers: what the model is told about it, the facts the
// sidecar schedules its calls by, and the function that runs it. Every flag defaults
// to the safe choice: a tool is assumed to write, to be unsafe to retry and to need no
// approval unless it says otherwise.
type Tool struct {
	// Name is what the model calls: 1 to 64 of [A-Za-z0-9_-], unique per server.
	Name string
	// Description says what the tool does and when to use it, for the model. Required.
	Description string
	// InputSchema is the JSON Schema (draft 2020-12) of the arguments, as JSON text; its
	// root is an object schema. Empty means a tool without arguments. Arguments are
	// validated against it before Handler runs.
	InputSchema string
	// OutputSchema is the JSON Schema of the output, as JSON text; may be empty.
	OutputSchema string
	// ReadOnly: the tool changes nothing, so its calls may run concurrently with any
	// reader, and early, while the model is still speaking.
	ReadOnly bool
	// Idempotent: calling twice with the same arguments equals calling once, so a
	// failed call may be retried or hedged.
	Idempotent bool
	// Destructive: the tool's effect cannot be undone (a refund, a deletion).
	Destructive bool
	// RequiresApproval: a person approves each call before it runs.
	RequiresApproval bool
	// ReadKeys and WriteKeys are resource keys such as "sku:{sku}", where {field} is a
	// top-level argument: a call that writes a key waits for earlier calls that read or
	// write it; calls with disjoint keys never wait for each other.
	ReadKeys, WriteKeys []string
	// Timeout is how long one call may take when the caller sets nothing shorter; zero
	// leaves it to the caller.
	Timeout time.Duration
	// CacheTTL is how long a result may be reused, for read-only tools; zero never.
	CacheTTL time.Duration
	// Version is free-form and part of every cache key; empty means the server's.
	Version string
	// ResultFields are the fields of a JSON output the model needs ("status",
	// "parcel.eta"); empty keeps the whole output.
	ResultFields []string
	// Handler runs the tool. Required.
	Handler Handler
}

// Handler runs one call of a tool with arguments that passed the tool's schema. ctx
// carries the call's deadline and is cancelled when the caller cancels: stop there.
//
// What it returns becomes the output the model sees: a string as it is, a
// json.RawMessage as it is, anything else encoded as JSON. An error is a failure the
// model sees (TOOL_ERROR_KIND_EXECUTION_FAILED): return Fail(...) for failures you
// anticipated, whose message is sent exactly; any other error is sent as its text.
type Handler func(ctx context.Context, call *Call) (any, error)

// Typed adapts a function of decoded arguments to a Handler: the arguments are decoded
// into In with encoding/json (use json tags; a json.Number or any field keeps large
// integers exact).
func Typed[In, Out any](fn func(ctx context.Context, in In) (Out, error)) Handler {
	return func(ctx context.Context, call *Call) (any, error) {
		var in In
		if err := call.Bind(&in); err != nil {
			return nil, err
		}
		return fn(ctx, in)
	}
}

// Call is one call of a tool.
type Call struct {
	// ID is the caller's id for the call: the model's tool-call id when the sidecar
	// calls. May be empty.
	ID string
	// Tool is the tool's name.
	Tool string
	// Arguments are the call's arguments exactly as the caller sent them: a JSON object
	// that passed the tool's input schema.
	Arguments json.RawMessage

	progress func(*pb.ToolProgress) error
	ctx      context.Context
	identity *Identity
}

// Bind decodes the arguments into v (a pointer), as encoding/json does, with numbers
// in an any field decoded as json.Number. A mismatch between the arguments and v is
// reported to the model as invalid arguments.
func (c *Call) Bind(v any) error {
	decoder := json.NewDecoder(bytes.NewReader(c.Arguments))
	decoder.UseNumber()
	if err := decoder.Decode(v); err != nil {
		return &argumentError{fmt.Sprintf("Invalid arguments for %s: %v\nCall %s again with corrected arguments.", c.Tool, err, c.Tool)}
	}
	return nil
}

// Progress reports progress to a caller of StreamTool (work done and total, in the
// tool's own units, total 0 when unknown, and a short note). On CallTool it does
// nothing. It fails once the call is over.
func (c *Call) Progress(done, total float64, message string) error {
	if c.progress == nil {
		return nil
	}
	return c.progress(&pb.ToolProgress{Progress: done, Total: total, Message: message})
}

// Failure is a failure a tool anticipated; the model sees its message exactly.
type Failure struct {
	Message string
}

func (f *Failure) Error() string { return f.Message }

// Fail returns a *Failure with a formatted message, for the model:
//
//	return nil, toolserver.Fail("order %s does not exist", id)
func Fail(format string, args ...any) error {
	return &Failure{Message: fmt.Sprintf(format, args...)}
}

// argumentError is an argument problem found after the schema (decoding into a type).
type argumentError struct{ message string }

func (e *argumentError) Error() string { return e.message }

// DefinitionError is a tool declared wrongly; Register returns it with a message that
// says how to fix the declaration.
type DefinitionError struct {
	Tool    string
	Problem string
}

func (e *DefinitionError) Error() string {
	return fmt.Sprintf("toolserver: tool %q: %s", e.Tool, e.Problem)
}

var (
	toolName    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	placeholder = regexp.MustCompile(`\{([^{}]*)\}`)
)

// registered is a tool ready to serve: its schema compiled, its descriptor built.
type registered struct {
	Tool
	schema     *schema
	descriptor *pb.ToolDescriptor
}

func define(t Tool, serverVersion string) (*registered, error) {
	fail := func(format string, args ...any) error {
		return &DefinitionError{Tool: t.Name, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case !toolName.MatchString(t.Name):
		return nil, fail("a name is 1 to 64 of [A-Za-z0-9_-]; rename it")
	case strings.TrimSpace(t.Description) == "":
		return nil, fail("the model needs a description: say what the tool does and when to use it")
	case t.Handler == nil:
		return nil, fail("no Handler: set one (toolserver.Typed(fn) adapts a typed function)")
	case t.CacheTTL < 0 || t.Timeout < 0:
		return nil, fail("Timeout and CacheTTL cannot be negative")
	case t.CacheTTL > 0 && !t.ReadOnly:
		return nil, fail("only read-only tools are cached: set ReadOnly or drop CacheTTL")
	case t.ReadOnly && (t.Destructive || len(t.WriteKeys) > 0):
		return nil, fail("a read-only tool cannot be Destructive or have WriteKeys")
	}
	input := t.InputSchema
	if strings.TrimSpace(input) == "" {
		input = `{"type": "object", "properties": {}, "additionalProperties": false}`
	}
	compiled, properties, err := compileSchema(t.Name, input, true)
	if err != nil {
		return nil, fail("InputSchema: %v", err)
	}
	if t.OutputSchema != "" {
		if _, _, err := compileSchema(t.Name+".output", t.OutputSchema, false); err != nil {
			return nil, fail("OutputSchema: %v", err)
		}
	}
	for _, key := range slices.Concat(t.ReadKeys, t.WriteKeys) {
		for _, m := range placeholder.FindAllStringSubmatch(key, -1) {
			if !slices.Contains(properties, m[1]) {
				return nil, fail("key %q names {%s}, which is no top-level property of InputSchema (%s)",
					key, m[1], strings.Join(properties, ", "))
			}
		}
	}
	version := t.Version
	if version == "" {
		version = serverVersion
	}
	d := &pb.ToolDescriptor{
		Name:             t.Name,
		Description:      strings.TrimSpace(t.Description),
		InputSchema:      compact(input),
		OutputSchema:     compact(t.OutputSchema),
		ReadOnly:         t.ReadOnly,
		Idempotent:       t.Idempotent,
		Destructive:      t.Destructive,
		RequiresApproval: t.RequiresApproval,
		ReadKeys:         t.ReadKeys,
		WriteKeys:        t.WriteKeys,
		Version:          version,
		ResultFields:     t.ResultFields,
	}
	if t.Timeout > 0 {
		d.DefaultTimeout = durationpb.New(t.Timeout)
	}
	if t.CacheTTL > 0 {
		d.CacheTtl = durationpb.New(t.CacheTTL)
	}
	return &registered{Tool: t, schema: compiled, descriptor: d}, nil
}

func compact(text string) string {
	if text == "" {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(text)); err != nil {
		return text // compileSchema has parsed it already
	}
	return buf.String()
}

// encodeOutput turns what a handler returned into the output text the model sees.
func encodeOutput(value any) (string, error) {
	switch v := value.(type) {
	case string:
		return v, nil
	case json.RawMessage:
		if !json.Valid(v) {
			return "", errors.New("the tool returned a json.RawMessage that is not valid JSON")
		}
		return string(v), nil
	}
	data, err := json.Marshal(value)
	if err != nil {
		return "", fmt.Errorf("the tool's result cannot be encoded as JSON: %v", err)
	}
	return string(data), nil
}
