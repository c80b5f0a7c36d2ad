// The whoami tool server: whoami answers with who the call serves, as the sidecar sent it
// and, with the identity flags, as its signed assertion proves it.
//
//	agent-sidecar identity jwks --config sidecar.yaml > jwks.json
//	go run ./examples/whoami --port 7005 \
//		--identity-keys jwks.json --identity-audience whoami --require-identity
//
// or, fetching the keys from the sidecar (its gRPC port) instead of a file:
//
//	go run ./examples/whoami --port 7005 \
//		--identity-keys-from 127.0.0.1:50051 --identity-audience whoami --require-identity
package main

import (
	"context"

	"github.com/agent-sidecar/agent-sidecar/toolservers/go/toolserver"
)

type identity struct {
	Principal     string            `json:"principal"`
	SessionID     string            `json:"session_id"`
	RunID         string            `json:"run_id"`
	CallID        string            `json:"call_id"`
	Labels        map[string]string `json:"labels"`
	LabelsOmitted bool              `json:"labels_omitted"`
	Verified      bool              `json:"verified"`
	Claims        map[string]any    `json:"claims"`
}

func whoami(_ context.Context, call *toolserver.Call) (any, error) {
	id, err := call.Identity()
	if err != nil {
		return nil, err
	}
	return identity{id.Principal, id.SessionID, id.RunID, id.CallID, id.Labels, id.LabelsOmitted, id.Verified, id.Claims}, nil
}

func main() {
	server := toolserver.New("whoami")
	server.MustRegister(toolserver.Tool{
		Name:        "whoami",
		Description: "Say who the call serves: the principal, session, run, call and labels.",
		ReadOnly:    true,
		Handler:     whoami,
	})
	server.Main()
}
