package toolserver_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
	"github.com/agent-sidecar/agent-sidecar/toolservers/go/toolserver"
)

// The sidecar's IdentityKeysService is played by keysServer: it answers the JWKS of its
// signers, or UNAVAILABLE while it is down, and remembers when it was asked.

type keysServer struct {
	pb.UnimplementedIdentityKeysServiceServer
	mu      sync.Mutex
	signers []*signer
	maxAge  time.Duration
	down    bool
	asked   []time.Time
}

func (k *keysServer) GetIdentityKeys(context.Context, *pb.GetIdentityKeysRequest) (*pb.GetIdentityKeysResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked = append(k.asked, time.Now())
	if k.down {
		return nil, status.Error(codes.Unavailable, "the sidecar is starting")
	}
	return &pb.GetIdentityKeysResponse{Jwks: jwksOf(k.signers...), MaxAge: durationpb.New(k.maxAge)}, nil
}

// set changes what the server answers.
func (k *keysServer) set(change func(k *keysServer)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	change(k)
}

func (k *keysServer) times() []time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]time.Time(nil), k.asked...)
}

// serveKeys serves k on 127.0.0.1 and is its address.
func serveKeys(t *testing.T, k *keysServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterIdentityKeysServiceServer(gs, k)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

// jwksOf is the JWKS of signers, as `agent-sidecar identity jwks` prints it.
func jwksOf(signers ...*signer) string {
	keys := []map[string]string{}
	for _, s := range signers {
		x := base64.RawURLEncoding.EncodeToString(s.key.Public().(ed25519.PublicKey))
		keys = append(keys, map[string]string{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": s.kid, "alg": "EdDSA", "use": "sig"})
	}
	doc, _ := json.Marshal(map[string]any{"keys": keys})
	return string(doc)
}

// logged keeps the messages of the warnings a server logs.
type logged struct {
	mu       sync.Mutex
	warnings []string
}

func (l *logged) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }
func (l *logged) WithAttrs([]slog.Attr) slog.Handler               { return l }
func (l *logged) WithGroup(string) slog.Handler                    { return l }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warnings = append(l.warnings, r.Message)
	return nil
}

func (l *logged) has(phrase string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, message := range l.warnings {
		if strings.Contains(message, phrase) {
			return true
		}
	}
	return false
}

// eventually waits up to 10 s for done.
func eventually(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fast are the fetcher's waits shortened: a retry after 20 ms doubling to 200 ms, an
// unknown kid's fetch 50 ms after the last.
var fast = toolserver.WithFetchTimings(20*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond, time.Millisecond)

// verifies: the token verifies as alice's.
func verifies(t *testing.T, client pb.ToolServiceClient, token string) bool {
	t.Helper()
	id, err := callWhoami(t, client, append(plainMetadata("alice"), "x-agent-identity", token)...)
	return err == nil && id.Verified && id.Principal == "alice"
}

// refusedWith: the token is refused UNAUTHENTICATED with phrase.
func refusedWith(t *testing.T, client pb.ToolServiceClient, token, phrase string) bool {
	t.Helper()
	_, err := callWhoami(t, client, append(plainMetadata("alice"), "x-agent-identity", token)...)
	return status.Code(err) == codes.Unauthenticated && strings.Contains(status.Convert(err).Message(), phrase)
}

func TestKeysFetchedFromASidecarVerifyAnAssertion(t *testing.T) {
	s := newSigner(t)
	keys := &keysServer{signers: []*signer{s}, maxAge: time.Hour}
	var runs atomic.Int32
	client := whoamiServer(t, &runs, fast, toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFrom: serveKeys(t, keys), Audience: "ident", Required: true,
	}))
	token := s.sign(t, claimsFor("ident"))
	eventually(t, "the fetched keys verify the assertion", func() bool { return verifies(t, client, token) })
	id, err := callWhoami(t, client, append(plainMetadata("alice"), "x-agent-identity", token)...)
	if err != nil || !id.Verified || id.SessionID != "user-1" || id.RunID != "run-1" || id.Claims["aud"] != "ident" {
		t.Fatalf("%+v %v", id, err)
	}
	if n := len(keys.times()); n != 1 {
		t.Fatalf("the keys were fetched %d times, want once (max_age is an hour)", n)
	}
}

func TestUntilTheKeysAreFetchedACallWithAnAssertionIsRefused(t *testing.T) {
	s := newSigner(t)
	keys := &keysServer{signers: []*signer{s}, maxAge: time.Hour, down: true}
	address := serveKeys(t, keys)
	var runs atomic.Int32
	log := &logged{}
	client := whoamiServer(t, &runs, fast, toolserver.WithLogger(slog.New(log)), toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFrom: address, Audience: "ident",
	}))
	token := s.sign(t, claimsFor("ident"))
	eventually(t, "three failed fetches", func() bool { return len(keys.times()) >= 3 })
	_, err := callWhoami(t, client, append(plainMetadata("alice"), "x-agent-identity", token)...)
	message := status.Convert(err).Message()
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(message, "the identity keys are not fetched yet") || !strings.Contains(message, address) {
		t.Fatalf("got %v, want UNAUTHENTICATED: the identity keys are not fetched yet from %s", err, address)
	}
	if runs.Load() != 0 {
		t.Fatal("the handler ran")
	}
	// A call without an assertion is not affected (the server does not require one).
	if plain, err := callWhoami(t, client, plainMetadata("bob")...); err != nil || plain.Verified || plain.Principal != "bob" {
		t.Fatalf("%+v %v", plain, err)
	}
	if !log.has("cannot fetch the identity keys") {
		t.Fatalf("no warning of the failed fetch: %v", log.warnings)
	}
	// Retried after 20 ms, then 40 ms: doubling.
	asked := keys.times()
	if first, second := asked[1].Sub(asked[0]), asked[2].Sub(asked[1]); first < 20*time.Millisecond || second < 40*time.Millisecond {
		t.Fatalf("retried after %v then %v, want at least 20 ms then 40 ms", first, second)
	}

	keys.set(func(k *keysServer) { k.down = false })
	eventually(t, "the assertion verifies once the sidecar answers", func() bool { return verifies(t, client, token) })
}

func TestARotationVerifiesAfterTheUnknownKidRefreshesTheKeys(t *testing.T) {
	current, next, stranger := newSigner(t), newSigner(t), newSigner(t)
	keys := &keysServer{signers: []*signer{current}, maxAge: time.Hour}
	var runs atomic.Int32
	soonest := 200 * time.Millisecond
	client := whoamiServer(t, &runs,
		toolserver.WithFetchTimings(20*time.Millisecond, 200*time.Millisecond, soonest, time.Millisecond),
		toolserver.WithIdentity(toolserver.IdentityConfig{KeysFrom: serveKeys(t, keys), Audience: "ident"}))
	old := current.sign(t, claimsFor("ident"))
	eventually(t, "the current key verifies", func() bool { return verifies(t, client, old) })

	// The sidecars publish the next key; tool servers learn it when it signs.
	keys.set(func(k *keysServer) { k.signers = []*signer{current, next} })
	rotated := next.sign(t, claimsFor("ident"))
	if !refusedWith(t, client, rotated, "a key this server does not know") {
		t.Fatal("the next key is known before any refresh")
	}
	eventually(t, "the next key verifies after the refresh its kid asked for", func() bool { return verifies(t, client, rotated) })
	if !verifies(t, client, old) {
		t.Fatal("the current key no longer verifies")
	}

	// A stream of unknown kids fetches at most once per soonest.
	before := len(keys.times())
	forged := stranger.sign(t, claimsFor("ident"))
	for end := time.Now().Add(3 * soonest); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if !refusedWith(t, client, forged, "a key this server does not know") {
			t.Fatal("a stranger's key verifies")
		}
	}
	asked := keys.times()
	if n := len(asked) - before; n < 1 || n > 4 {
		t.Fatalf("%d fetches in %v of unknown kids, want 1 to 4 (one per %v at most)", n, 3*soonest, soonest)
	}
	for i := 1; i < len(asked); i++ {
		if gap := asked[i].Sub(asked[i-1]); gap < soonest*3/4 {
			t.Fatalf("fetches %v apart, want %v at least", gap, soonest)
		}
	}
}

func TestAFailedRefreshKeepsTheKeys(t *testing.T) {
	current, next := newSigner(t), newSigner(t)
	keys := &keysServer{signers: []*signer{current}, maxAge: time.Hour}
	var runs atomic.Int32
	log := &logged{}
	client := whoamiServer(t, &runs, fast, toolserver.WithLogger(slog.New(log)), toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFrom: serveKeys(t, keys), Audience: "ident",
	}))
	old := current.sign(t, claimsFor("ident"))
	eventually(t, "the current key verifies", func() bool { return verifies(t, client, old) })

	keys.set(func(k *keysServer) { k.down, k.signers = true, []*signer{current, next} })
	rotated := next.sign(t, claimsFor("ident"))
	if !refusedWith(t, client, rotated, "a key this server does not know") {
		t.Fatal("the next key is known before any refresh")
	}
	eventually(t, "a warning of the failed refresh", func() bool { return log.has("cannot refresh the identity keys") })
	if !verifies(t, client, old) {
		t.Fatal("a failed refresh dropped the keys")
	}
	if !refusedWith(t, client, rotated, "a key this server does not know") {
		t.Fatal("the next key verifies though no fetch answered")
	}

	keys.set(func(k *keysServer) { k.down = false })
	eventually(t, "the next key verifies once the sidecar answers again", func() bool { return verifies(t, client, rotated) })
}

func TestTheKeysAreFetchedAgainEveryMaxAgeAndNewKeysForgetWhatTheOldVerified(t *testing.T) {
	current, next := newSigner(t), newSigner(t)
	keys := &keysServer{signers: []*signer{current}, maxAge: 100 * time.Millisecond}
	var runs atomic.Int32
	client := whoamiServer(t, &runs,
		// An unknown kid would refresh only after an hour: max_age does it.
		toolserver.WithFetchTimings(20*time.Millisecond, 200*time.Millisecond, time.Hour, time.Millisecond),
		toolserver.WithIdentity(toolserver.IdentityConfig{KeysFrom: serveKeys(t, keys), Audience: "ident"}))
	old := current.sign(t, claimsFor("ident"))
	eventually(t, "the current key verifies", func() bool { return verifies(t, client, old) })
	if !verifies(t, client, old) { // now from what the server remembers
		t.Fatal("the remembered assertion does not verify")
	}

	keys.set(func(k *keysServer) { k.signers = []*signer{next} }) // the old key retired
	rotated := next.sign(t, claimsFor("ident"))
	eventually(t, "the next key verifies after max_age", func() bool { return verifies(t, client, rotated) })
	if !refusedWith(t, client, old, "a key this server does not know") {
		t.Fatal("an assertion of the retired key still verifies: the server remembered it across new keys")
	}
	if n := len(keys.times()); n < 2 {
		t.Fatalf("fetched %d times", n)
	}
}

func TestKeysFromATLSSidecarAreVerifiedAgainstKeysCA(t *testing.T) {
	caFile, serverCert := testPKI(t)
	s := newSigner(t)
	keys := &keysServer{signers: []*signer{s}, maxAge: time.Hour}
	address := serveKeys(t, keys, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}})))
	var runs atomic.Int32
	client := whoamiServer(t, &runs, fast, toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFrom: address, KeysCA: caFile, Audience: "ident",
	}))
	token := s.sign(t, claimsFor("ident"))
	eventually(t, "the keys fetched over TLS verify", func() bool { return verifies(t, client, token) })

	// Another CA's certificate is not believed.
	otherCA, _ := testPKI(t)
	var otherRuns atomic.Int32
	log := &logged{}
	distrusting := whoamiServer(t, &otherRuns, fast, toolserver.WithLogger(slog.New(log)), toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFrom: address, KeysCA: otherCA, Audience: "ident",
	}))
	eventually(t, "a failed fetch", func() bool { return log.has("cannot fetch the identity keys") })
	if !refusedWith(t, distrusting, token, "the identity keys are not fetched yet") {
		t.Fatal("keys from a sidecar of another CA were taken")
	}
}

func TestServeStopsAtStartOnABadKeysSource(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	keysFile := newSigner(t).jwks(t)
	cases := []struct {
		name   string
		cfg    toolserver.IdentityConfig
		reason string
	}{
		{"unreadable CA", toolserver.IdentityConfig{KeysFrom: "agent-sidecar:50051", KeysCA: filepath.Join(dir, "absent.pem")}, "cannot read the CA"},
		{"CA without certificates", toolserver.IdentityConfig{KeysFrom: "agent-sidecar:50051", KeysCA: notPEM}, "holds no PEM certificate"},
		{"both sources", toolserver.IdentityConfig{KeysFrom: "127.0.0.1:50051", KeysFile: keysFile}, "not both"},
		{"no source", toolserver.IdentityConfig{}, "needs KeysFile"},
		{"a CA for a file", toolserver.IdentityConfig{KeysFile: keysFile, KeysCA: notPEM}, "it needs KeysFrom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Audience = "ident"
			server := toolserver.New("identity", toolserver.WithIdentity(c.cfg))
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			err = server.Serve(context.Background(), lis, time.Second)
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("Serve: %v, want an error with %q", err, c.reason)
			}
		})
	}
}

// testPKI is a CA's certificate file and a certificate it signed for 127.0.0.1.
func testPKI(t *testing.T) (string, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "agent-sidecar"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}
}

func TestTheFetchingStopsWhenTheServerStops(t *testing.T) {
	s := newSigner(t)
	keys := &keysServer{signers: []*signer{s}, maxAge: 5 * time.Millisecond}
	server := toolserver.New("identity", fast, toolserver.WithIdentity(toolserver.IdentityConfig{
		KeysFrom: serveKeys(t, keys), Audience: "ident",
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, lis, time.Second) }()
	eventually(t, "fetches every max_age", func() bool { return len(keys.times()) >= 3 })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopped := len(keys.times())
	time.Sleep(50 * time.Millisecond)
	if n := len(keys.times()); n != stopped {
		t.Fatalf("%d fetches after Serve returned", n-stopped)
	}
}

func TestMainFetchesTheKeysWithIdentityKeysFrom(t *testing.T) {
	s := newSigner(t)
	address := serveKeys(t, &keysServer{signers: []*signer{s}, maxAge: time.Hour})
	cmd := exec.Command(os.Args[0], "--port", "0", "--log-level", "error",
		"--identity-keys-from", address, "--identity-audience", "ident", "--require-identity")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	listening, found := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !found {
		t.Fatalf("the first line is %q (%v)", line, err)
	}
	conn, err := grpc.NewClient(listening, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewToolServiceClient(conn)
	token := s.sign(t, claimsFor("ident"))
	pairs := []string{"x-agent-principal", "alice", "x-agent-session-id", "user-1", "x-agent-run-id", "run-1", "x-agent-identity", token}
	eventually(t, "the hold tool runs with a verified assertion", func() bool {
		ctx := metadata.AppendToOutgoingContext(callContext(t), pairs...)
		call, err := client.StreamTool(ctx, &pb.StreamToolRequest{Call: &pb.CallToolRequest{ToolName: "hold"}})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := call.Recv()
		if err != nil && !strings.Contains(status.Convert(err).Message(), "the identity keys are not fetched yet") {
			t.Fatalf("the call: %v", err)
		}
		return err == nil && msg.GetProgress() != nil
	})
}

func TestMainRefusesIdentityKeysFlagsThatDoNotGoTogether(t *testing.T) {
	for _, args := range [][]string{
		{"--identity-keys", "jwks.json", "--identity-keys-from", "127.0.0.1:50051", "--identity-audience", "a"},
		{"--identity-keys-ca", "ca.pem", "--identity-audience", "a"},
		{"--identity-keys-from", "127.0.0.1:50051"},
		{"--identity-keys", "jwks.json", "--identity-keys-ca", "ca.pem", "--identity-audience", "a"},
	} {
		cmd := exec.Command(os.Args[0], append([]string{"--port", "0"}, args...)...)
		cmd.Env = append(os.Environ(), childEnv+"=1")
		output, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(output), "--identity-") {
			t.Errorf("%v: %v %s, want exit 2 naming the flag", args, err, output)
		}
	}
}
