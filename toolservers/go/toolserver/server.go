package toolserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// ServiceName is the health service name of the tool-server protocol.
const ServiceName = "agentsidecar.v1.ToolService"

// DefaultGrace is how long running calls get to finish after SIGTERM.
const DefaultGrace = 10 * time.Second

// keepalivePolicy accepts the sidecar's pings: its channels ping every 30 s, with or
// without calls in flight. grpc-go's default policy (at most one ping per 5 minutes, none
// without a call) would answer them with GOAWAY "too_many_pings" and drop the
// connection the sidecar watches health on.
var keepalivePolicy = keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}

// Server is a tool server: the tools it offers, served over gRPC with health and
// reflection. Register every tool, then Serve (or Main).
type Server struct {
	name    string
	version string
	log     *slog.Logger
	extra   []grpc.ServerOption
	// identity, when set, verifies every call's identity assertion.
	identity *IdentityConfig
	// fetchTimings, when set, replace the keys fetcher's waits (in tests).
	fetchTimings *fetchTimings

	mu      sync.Mutex
	tools   []*registered
	serving bool
}

// Option configures a Server.
type Option func(*Server)

// WithVersion sets the version of every tool that declares none (default "1").
func WithVersion(version string) Option { return func(s *Server) { s.version = version } }

// WithLogger sets the logger (default: slog's default logger, on stderr).
func WithLogger(log *slog.Logger) Option { return func(s *Server) { s.log = log } }

// WithServerOptions adds gRPC server options (TLS credentials, interceptors ...).
func WithServerOptions(opts ...grpc.ServerOption) Option {
	return func(s *Server) { s.extra = append(s.extra, opts...) }
}

// New makes a tool server called name (for its logs).
func New(name string, opts ...Option) *Server {
	s := &Server{name: name, version: "1", log: slog.Default()}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Register adds a tool. A tool declared wrongly (a bad or duplicate name, no
// description, a schema that does not compile or whose root is not an object, a key
// naming no argument ...) is a *DefinitionError saying how to fix it.
func (s *Server) Register(t Tool) error {
	r, err := define(t, s.version)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		return &DefinitionError{Tool: t.Name, Problem: "the server is serving already: register every tool before Serve"}
	}
	for _, other := range s.tools {
		if other.Name == t.Name {
			return &DefinitionError{Tool: t.Name, Problem: "a tool of that name is registered already; pick another name"}
		}
	}
	s.tools = append(s.tools, r)
	return nil
}

// MustRegister is Register that panics on a mistake, for tools declared in main.
func (s *Server) MustRegister(t Tool) {
	if err := s.Register(t); err != nil {
		panic(err)
	}
}

// Serve serves the tools on lis until ctx is done, then drains and returns nil:
//
//  1. new tool calls are refused with UNAVAILABLE (retry on another instance);
//  2. health turns NOT_SERVING for every service name, which reaches every open
//     Health.Watch stream at once: the sidecar stops routing calls here. Each Watch
//     stream then ends: GracefulStop waits for every stream, and the sidecar holds one
//     open for as long as it is connected;
//  3. GracefulStop: no new connections, running calls finish and their answers are
//     sent; it returns once every connection has closed;
//  4. when grace passes first, Stop: calls still running are cancelled.
//
// It returns early with the error of a listener that fails.
func (s *Server) Serve(ctx context.Context, lis net.Listener, grace time.Duration) error {
	return s.serve(ctx, lis, grace, nil)
}

func (s *Server) serve(ctx context.Context, lis net.Listener, grace time.Duration, ready func()) error {
	svc, err := s.freeze()
	if err != nil {
		return err
	}
	if s.identity != nil {
		if svc.verifier, err = newVerifier(*s.identity); err != nil {
			return err
		}
		if svc.verifier.fetcher != nil && s.fetchTimings != nil {
			svc.verifier.fetcher.timings = *s.fetchTimings
		}
		stopFetching, err := svc.verifier.startFetching(s.log)
		if err != nil {
			return err
		}
		defer stopFetching() // once the server has stopped
	}
	opts := append([]grpc.ServerOption{grpc.KeepaliveEnforcementPolicy(keepalivePolicy)}, s.extra...)
	gs := grpc.NewServer(opts...)
	pb.RegisterToolServiceServer(gs, svc)
	healthServer := &drainingHealth{Server: health.NewServer(), draining: make(chan struct{})}
	healthpb.RegisterHealthServer(gs, healthServer)
	reflection.Register(gs) // v1 and v1alpha
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthServer.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)

	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	if ready != nil {
		ready()
	}
	s.log.Info("serving", "server", s.name, "address", lis.Addr().String(), "tools", len(svc.names))
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}

	svc.inflight.drain()
	close(healthServer.draining)
	healthServer.Shutdown()
	s.log.Info("draining", "server", s.name, "running_calls", svc.inflight.count(), "grace", grace)
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		s.log.Warn("grace period over: cancelling running calls", "server", s.name, "running_calls", svc.inflight.count())
		gs.Stop()
		<-stopped
	}
	<-served
	s.log.Info("stopped", "server", s.name)
	return nil
}

// freeze builds the service once: the tool list and its version cannot change while
// the server runs.
func (s *Server) freeze() (*service, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		return nil, errors.New("toolserver: Serve was called already")
	}
	s.serving = true
	svc := &service{tools: map[string]*registered{}, inflight: &inflight{}, log: s.log}
	list := &pb.ListToolsResponse{}
	digest := sha256.New()
	for _, t := range s.tools {
		svc.tools[t.Name] = t
		svc.names = append(svc.names, t.Name)
		list.Tools = append(list.Tools, t.descriptor)
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(t.descriptor)
		if err != nil {
			return nil, err
		}
		digest.Write(data)
	}
	list.ToolSetVersion = hex.EncodeToString(digest.Sum(nil))[:16]
	svc.list = list
	return svc, nil
}

// Config is where and how Run serves.
type Config struct {
	// Host to bind; "" means 127.0.0.1. 0.0.0.0 accepts other hosts.
	Host string
	// Port to bind; 0 picks a free one (the announced line says which).
	Port int
	// Grace is how long running calls get after the context ends; 0 means DefaultGrace.
	Grace time.Duration
	// Announce receives the line "listening on HOST:PORT" once the server accepts
	// connections; nil means os.Stdout. Launchers read the address from it.
	Announce io.Writer
}

// Run listens as cfg says, announces the address, and serves until ctx is done (see
// Serve for the drain).
func (s *Server) Run(ctx context.Context, cfg Config) error {
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	grace := cfg.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	announce := cfg.Announce
	if announce == nil {
		announce = os.Stdout
	}
	lis, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(cfg.Port)))
	if err != nil {
		return err
	}
	return s.serve(ctx, lis, grace, func() {
		fmt.Fprintf(announce, "listening on %s\n", lis.Addr().String())
	})
}

// Main is a tool server's whole main function: it reads the flags --host, --port,
// --grace, --log-level and the identity flags (--identity-keys FILE or
// --identity-keys-from TARGET with --identity-keys-ca FILE, --identity-audience NAME,
// --identity-issuer NAME, --require-identity, --identity-leeway DURATION; see
// IdentityConfig) from the command line, serves until SIGTERM or SIGINT, drains (see
// Serve) and exits 0; a second signal ends it at once. It exits 1 when it cannot serve
// and 2 on bad flags.
func (s *Server) Main() {
	flags := flag.NewFlagSet(s.name, flag.ExitOnError)
	host := flags.String("host", "127.0.0.1", "address to bind; 0.0.0.0 accepts other hosts")
	port := flags.Int("port", 0, "port to bind; 0 picks a free one (the printed line says which)")
	grace := flags.Duration("grace", DefaultGrace, "how long running calls get to finish after SIGTERM")
	level := flags.String("log-level", "info", "stderr log level: debug, info, warn or error")
	keys := flags.String("identity-keys", "", "verify each call's identity assertion with the sidecar's public keys (a JWKS from 'agent-sidecar identity jwks', or a PEM public key)")
	keysFrom := flags.String("identity-keys-from", "", "verify each call's identity assertion with the public keys fetched from this sidecar (its gRPC target: HOST:PORT or unix:PATH); plaintext only to this machine, TLS elsewhere")
	keysCA := flags.String("identity-keys-ca", "", "PEM certificates of the CAs to verify --identity-keys-from's TLS certificate with (default: the system's roots); with it a local target is dialled with TLS too")
	audience := flags.String("identity-audience", "", "this server's name in the sidecar's configuration (tool_servers[].name)")
	issuer := flags.String("identity-issuer", DefaultIssuer, "the issuer the sidecar signs as")
	required := flags.Bool("require-identity", false, "refuse calls without a verified identity assertion")
	leeway := flags.Duration("identity-leeway", DefaultLeeway, "clock difference allowed when checking an assertion's lifetime")
	_ = flags.Parse(os.Args[1:])
	switch {
	case *keys != "" && *keysFrom != "":
		fmt.Fprintf(os.Stderr, "%s: give one of --identity-keys (a file) and --identity-keys-from (a sidecar), not both\n", s.name)
		os.Exit(2)
	case *keysCA != "" && *keysFrom == "":
		fmt.Fprintf(os.Stderr, "%s: --identity-keys-ca verifies the sidecar of --identity-keys-from: it needs --identity-keys-from\n", s.name)
		os.Exit(2)
	case *keys != "" && *audience == "":
		fmt.Fprintf(os.Stderr, "%s: --identity-keys needs --identity-audience: this server's name in the sidecar's configuration\n", s.name)
		os.Exit(2)
	case *keysFrom != "" && *audience == "":
		fmt.Fprintf(os.Stderr, "%s: --identity-keys-from needs --identity-audience: this server's name in the sidecar's configuration\n", s.name)
		os.Exit(2)
	case *required && *keys == "" && *keysFrom == "":
		fmt.Fprintf(os.Stderr, "%s: --require-identity needs --identity-keys or --identity-keys-from to verify with\n", s.name)
		os.Exit(2)
	case *keys != "" || *keysFrom != "":
		s.identity = &IdentityConfig{
			KeysFile: *keys, KeysFrom: *keysFrom, KeysCA: *keysCA,
			Audience: *audience, Issuer: *issuer, Required: *required, Leeway: *leeway,
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: --log-level: %v\n", s.name, err)
		os.Exit(2)
	}
	s.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal is not caught: it ends the process at once
	}()
	if err := s.Run(ctx, Config{Host: *host, Port: *port, Grace: *grace}); err != nil {
		s.log.Error("cannot serve", "server", s.name, "error", err)
		os.Exit(1)
	}
}
