package toolserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
	"github.com/agent-sidecar/agent-sidecar/toolservers/go/toolserver"
)

// The sidecar's side of these tests is played by the test: it signs as the sidecar does
// (tests/toolservers/test_go_toolserver.py has the real sidecar sign for the whoami
// example). The JWKS has the shape `agent-sidecar identity jwks` prints.

type signer struct {
	key ed25519.PrivateKey
	kid string
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	x := base64.RawURLEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + x + `"}`))
	return &signer{key: key, kid: base64.RawURLEncoding.EncodeToString(sum[:])}
}

func (s *signer) jwks(t *testing.T) string {
	t.Helper()
	x := base64.RawURLEncoding.EncodeToString(s.key.Public().(ed25519.PublicKey))
	doc, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": s.kid, "alg": "EdDSA", "use": "sig"},
	}})
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *signer) sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	token := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	token.Header["kid"] = s.kid
	signed, err := token.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

func claimsFor(audience string) jwt.MapClaims {
	now := time.Now().Unix()
	return jwt.MapClaims{
		"iss": "agent-sidecar", "sub": "alice", "aud": audience, "sid": "user-1",
		"run_id": "run-1", "labels": map[string]any{"team": "Zürich ☕"},
		"iat": now, "exp": now + 300, "jti": "j1",
	}
}

// plainMetadata is what the sidecar sends besides the assertion.
func plainMetadata(principal string) []string {
	return []string{
		"x-agent-principal", principal,
		"x-agent-session-id", "user-1",
		"x-agent-run-id", "run-1",
		"x-agent-call-id", "call_1",
		"x-agent-labels-bin", `{"team":"Zürich ☕"}`,
	}
}

// whoamiServer serves a tool that answers with call.Identity(), counting its runs.
func whoamiServer(t *testing.T, runs *atomic.Int32, opts ...toolserver.Option) pb.ToolServiceClient {
	t.Helper()
	server := toolserver.New("identity", opts...)
	server.MustRegister(toolserver.Tool{
		Name: "whoami", Description: "Who the call serves.", ReadOnly: true,
		Handler: func(ctx context.Context, call *toolserver.Call) (any, error) {
			runs.Add(1)
			id, err := call.Identity()
			if err != nil {
				return nil, err
			}
			fromCtx, err := toolserver.IdentityFrom(ctx)
			if err != nil || fromCtx.Principal != id.Principal {
				return nil, toolserver.Fail("IdentityFrom(ctx) disagrees: %v %v", fromCtx, err)
			}
			return id, nil
		},
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, lis, time.Second) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		conn.Close()
		<-done
	})
	return pb.NewToolServiceClient(conn)
}

func callWhoami(t *testing.T, client pb.ToolServiceClient, pairs ...string) (*toolserver.Identity, error) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(callContext(t), pairs...)
	response, err := client.CallTool(ctx, &pb.CallToolRequest{CallId: "call_1", ToolName: "whoami"})
	if err != nil {
		return nil, err
	}
	var id toolserver.Identity
	if err := json.Unmarshal([]byte(response.GetResult().GetOutput()), &id); err != nil {
		t.Fatalf("%v: %s", err, response.GetResult())
	}
	return &id, nil
}

func TestAHandlerReadsThePlainIdentityPercentDecoded(t *testing.T) {
	var runs atomic.Int32
	client := whoamiServer(t, &runs)
	id, err := callWhoami(t, client, "x-agent-principal", "a%20b%25", "x-agent-session-id", "user-1",
		"x-agent-run-id", "run-1", "x-agent-call-id", "call_1",
		"x-agent-labels-bin", `{"note":"line one\nline two","team":"東京"}`)
	if err != nil {
		t.Fatal(err)
	}
	if id.Principal != "a b%" || id.SessionID != "user-1" || id.RunID != "run-1" || id.CallID != "call_1" || id.Verified {
		t.Fatalf("identity %+v", id)
	}
	if id.Labels["team"] != "東京" || id.Labels["note"] != "line one\nline two" || id.LabelsOmitted {
		t.Fatalf("labels %+v", id.Labels)
	}
	omitted, err := callWhoami(t, client, "x-agent-labels-bin", "null")
	if err != nil || !omitted.LabelsOmitted || len(omitted.Labels) != 0 {
		t.Fatalf("labels too large to send: %+v %v", omitted, err)
	}
}

func TestAVerifiedIdentityComesFromTheClaims(t *testing.T) {
	s := newSigner(t)
	var runs atomic.Int32
	client := whoamiServer(t, &runs, toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFile: s.jwks(t), Audience: "ident", Required: true,
	}))
	token := s.sign(t, claimsFor("ident"))
	for range 2 { // the second time from what the first verified
		id, err := callWhoami(t, client, append(plainMetadata("alice"), "x-agent-identity", token)...)
		if err != nil {
			t.Fatal(err)
		}
		if !id.Verified || id.Principal != "alice" || id.SessionID != "user-1" || id.RunID != "run-1" || id.CallID != "call_1" {
			t.Fatalf("identity %+v", id)
		}
		if id.Labels["team"] != "Zürich ☕" || id.Claims["aud"] != "ident" || id.Claims["jti"] != "j1" {
			t.Fatalf("labels %v claims %v", id.Labels, id.Claims)
		}
	}
}

func TestAnAssertionThatDoesNotVerifyIsUnauthenticatedAndTheHandlerNeverRuns(t *testing.T) {
	s := newSigner(t)
	stranger := newSigner(t)
	good := s.sign(t, claimsFor("ident"))
	parts := strings.Split(good, ".")
	var payload map[string]any
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	_ = json.Unmarshal(raw, &payload)
	payload["sub"] = "mallory"
	changed, _ := json.Marshal(payload)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(changed) + "." + parts[2]
	expired := claimsFor("ident")
	expired["iat"], expired["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
	noRun := claimsFor("ident")
	delete(noRun, "run_id")

	cases := []struct {
		name, reason string
		metadata     []string
	}{
		{"missing", "carries no identity assertion", plainMetadata("alice")},
		{"wrong audience", "for another tool server", append(plainMetadata("alice"), "x-agent-identity", s.sign(t, claimsFor("shop")))},
		{"tampered", "signature does not verify", append(plainMetadata("mallory"), "x-agent-identity", tampered)},
		{"expired", "expired at", append(plainMetadata("alice"), "x-agent-identity", s.sign(t, expired))},
		{"unknown key", "a key this server does not know", append(plainMetadata("alice"), "x-agent-identity", stranger.sign(t, claimsFor("ident")))},
		{"contradicted", "x-agent-principal contradicts the identity assertion", append(plainMetadata("bob"), "x-agent-identity", good)},
		{"no run", `lacks the claim "run_id"`, append(plainMetadata("alice"), "x-agent-identity", s.sign(t, noRun))},
		{"not a jwt", "not a JWT", append(plainMetadata("alice"), "x-agent-identity", "garbage")},
		{"twice", "more than once", append(plainMetadata("alice"), "x-agent-identity", good, "x-agent-identity", good)},
	}
	var runs atomic.Int32
	client := whoamiServer(t, &runs, toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFile: s.jwks(t), Audience: "ident", Required: true,
	}))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := callWhoami(t, client, c.metadata...)
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), c.reason) {
				t.Fatalf("got %v, want UNAUTHENTICATED with %q", err, c.reason)
			}
		})
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
}

func TestAP256PEMKeyVerifiesES256(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	path := filepath.Join(t.TempDir(), "key.pub")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodES256, claimsFor("ident")).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	client := whoamiServer(t, &runs, toolserver.WithIdentity(toolserver.IdentityConfig{KeysFile: path, Audience: "ident"}))
	id, err := callWhoami(t, client, "x-agent-identity", token)
	if err != nil || !id.Verified || id.Principal != "alice" {
		t.Fatalf("%+v %v", id, err)
	}
	// Not required: a call without an assertion runs, unverified.
	plain, err := callWhoami(t, client, plainMetadata("bob")...)
	if err != nil || plain.Verified || plain.Principal != "bob" {
		t.Fatalf("%+v %v", plain, err)
	}
}

func TestAKeysFileWithNoUsableKeyStopsServe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`{"keys": [{"kty": "RSA", "kid": "x", "n": "AQAB", "e": "AQAB"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	server := toolserver.New("identity", toolserver.WithIdentity(toolserver.IdentityConfig{KeysFile: path, Audience: "a"}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	err = server.Serve(context.Background(), lis, time.Second)
	if err == nil || !strings.Contains(err.Error(), "holds no usable key") {
		t.Fatalf("Serve: %v", err)
	}
}

func TestTheFirstCheckOfTheRuleThatFailsNamesTheRefusal(t *testing.T) {
	s := newSigner(t)
	var runs atomic.Int32
	client := whoamiServer(t, &runs, toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFile: s.jwks(t), Audience: "ident", Required: true,
	}))
	claims := claimsFor("shop")
	claims["iss"] = "someone"
	claims["iat"], claims["exp"] = time.Now().Add(-2*time.Hour).Unix(), fmt.Sprint(time.Now().Add(-time.Hour).Unix())
	// Each step mends what refused the token before, and the next check refuses it.
	steps := []struct {
		reason string
		mend   func()
	}{
		{"the identity assertion's claim \"exp\"", func() { claims["exp"] = time.Now().Add(-time.Hour).Unix() }},
		{"issuer is not", func() { claims["iss"] = "agent-sidecar" }},
		{"for another tool server", func() { claims["aud"] = []string{"shop", "ident"} }},
		{"expired at", func() { claims["exp"] = json.Number(fmt.Sprintf("%d.0", time.Now().Add(time.Minute).Unix())) }},
	}
	for _, step := range steps {
		_, err := callWhoami(t, client, append(plainMetadata("alice"), "x-agent-identity", s.sign(t, claims))...)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), step.reason) {
			t.Fatalf("got %v, want UNAUTHENTICATED with %q", err, step.reason)
		}
		step.mend()
	}
	id, err := callWhoami(t, client, append(plainMetadata("alice"), "x-agent-identity", s.sign(t, claims))...)
	if err != nil || !id.Verified || id.Principal != "alice" {
		t.Fatalf("%+v %v", id, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}
