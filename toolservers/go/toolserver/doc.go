// Package toolserver writes tool servers for the agent sidecar in Go: register tools
// with a name, a description, a JSON Schema and the facts the sidecar schedules by,
// and serve them over the tool-server protocol (agentsidecar.v1.ToolService).
//
//	server := toolserver.New("currency")
//	server.MustRegister(toolserver.Tool{
//		Name:        "convert_currency",
//		Description: "Convert an amount between currencies.",
//		InputSchema: `{"type": "object", "properties": {...}, "required": [...]}`,
//		ReadOnly:    true,
//		Idempotent:  true,
//		Handler:     toolserver.Typed(convert),
//	})
//	server.Main() // --host, --port, --grace, --log-level
//
// What the package does for every tool server:
//
//   - Arguments are parsed once (numbers stay exact) and validated against the tool's
//     schema before its handler runs. A violation is data, not a status: a ToolResult
//     with TOOL_ERROR_KIND_INVALID_ARGUMENTS naming each field, so the model can call
//     again with corrected arguments. So is a handler's error
//     (TOOL_ERROR_KIND_EXECUTION_FAILED). Protocol failures are statuses: NOT_FOUND for
//     an unknown tool, INVALID_ARGUMENT for arguments that are not a JSON object,
//     DEADLINE_EXCEEDED and CANCELLED when the caller's deadline passes or it cancels,
//     UNAVAILABLE while draining.
//   - grpc.health.v1: SERVING for "" and "agentsidecar.v1.ToolService" while serving;
//     server reflection, v1 and v1alpha.
//   - A keepalive policy that accepts the sidecar's pings (every 30 s, even with no
//     call in flight).
//   - Draining on SIGTERM: new calls refused, health NOT_SERVING first, then a graceful
//     stop within a grace period in which running calls finish (see Server.Serve).
//   - One line on stdout once it accepts connections, "listening on HOST:PORT"; logs go
//     to stderr.
package toolserver
