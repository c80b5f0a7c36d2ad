package toolserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

// Fetching the keys from a sidecar (docs/tool-servers.md, "The signed assertion"): who
// it trusts, when it fetches, and what a rotation needs.

// fetchTimings are the waits of the keys fetcher.
type fetchTimings struct {
	retry      time.Duration // after the first failed fetch in a row; doubling ...
	maxRetry   time.Duration // ... up to this
	soonest    time.Duration // the least time from a fetch to the one an unknown kid asks for
	defaultAge time.Duration // how long to rely on keys whose answer has no max_age
	minAge     time.Duration // the shortest max_age taken
	timeout    time.Duration // one fetch
}

var defaultFetchTimings = fetchTimings{
	retry:      time.Second,
	maxRetry:   30 * time.Second,
	soonest:    10 * time.Second,
	defaultAge: 300 * time.Second,
	minAge:     time.Second,
	timeout:    10 * time.Second,
}

// keysFetcher fetches a sidecar's keys (IdentityKeysService) for a verifier.
type keysFetcher struct {
	target  string
	creds   credentials.TransportCredentials
	timings fetchTimings
	soon    chan struct{} // an assertion named a kid the keys lack
}

func newKeysFetcher(target, caFile string) (*keysFetcher, error) {
	creds, err := keysCredentials(target, caFile)
	if err != nil {
		return nil, err
	}
	return &keysFetcher{target: target, creds: creds, timings: defaultFetchTimings, soon: make(chan struct{}, 1)}, nil
}

// keysCredentials is how target is dialled: TLS verified against caFile's certificates
// when given, else plaintext to this machine and TLS with the system's roots elsewhere.
// The keys decide whom the server believes, so they never cross a network in plaintext.
func keysCredentials(target, caFile string) (credentials.TransportCredentials, error) {
	if caFile != "" {
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("toolserver: cannot read the CA to verify the identity keys' sidecar with (KeysCA, --identity-keys-ca): %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("toolserver: %s (KeysCA, --identity-keys-ca) holds no PEM certificate", caFile)
		}
		return credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}), nil
	}
	if localTarget(target) {
		return insecure.NewCredentials(), nil
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12}), nil
}

// localTarget: the gRPC target is on this machine, a unix socket, localhost or a loopback
// address ("127.0.0.1:50051", "[::1]:50051", "localhost:50051", "unix:/path",
// "dns:///localhost:50051").
func localTarget(target string) bool {
	if strings.HasPrefix(target, "unix:") || strings.HasPrefix(target, "unix-abstract:") {
		return true
	}
	address := target
	for _, scheme := range []string{"dns://", "passthrough://"} {
		if rest, ok := strings.CutPrefix(address, scheme); ok {
			_, address, _ = strings.Cut(rest, "/") // past the authority (a DNS server), often empty
			break
		}
	}
	host := address
	if h, _, err := net.SplitHostPort(address); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// refreshSoon asks for a fetch soon: an assertion named a kid the keys lack. It never
// blocks (it is called with the verifier's lock held).
func (f *keysFetcher) refreshSoon() {
	select {
	case f.soon <- struct{}{}:
	default: // asked already
	}
}

// startFetching fetches the keys in the background, when they come from a sidecar, until
// stop; stop returns once the fetching has ended.
func (v *verifier) startFetching(log *slog.Logger) (stop func(), err error) {
	f := v.fetcher
	if f == nil {
		return func() {}, nil
	}
	conn, err := grpc.NewClient(f.target,
		grpc.WithTransportCredentials(f.creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			// Reconnect as often as the fetches are retried, not grpc-go's default of up
			// to two minutes apart.
			Backoff:           backoff.Config{BaseDelay: f.timings.retry, Multiplier: 2, Jitter: 0.2, MaxDelay: f.timings.maxRetry},
			MinConnectTimeout: f.timings.timeout,
		}))
	if err != nil {
		return nil, fmt.Errorf("toolserver: cannot fetch the identity keys from %q (KeysFrom, --identity-keys-from): %w", f.target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Go(func() { v.fetchLoop(ctx, pb.NewIdentityKeysServiceClient(conn), log) })
	return func() {
		cancel()
		done.Wait()
		_ = conn.Close()
	}, nil
}

// fetchLoop fetches the keys until ctx ends: at once; after a failure again after
// timings.retry, doubling to timings.maxRetry; after an answer again when its max_age has
// passed, or timings.soonest after the last fetch began when an assertion names a kid
// the keys lack, whichever comes first. A failed refresh keeps the keys.
func (v *verifier) fetchLoop(ctx context.Context, client pb.IdentityKeysServiceClient, log *slog.Logger) {
	f := v.fetcher
	retry := f.timings.retry
	fetched := false
	for {
		began := time.Now()
		age, err := v.fetchOnce(ctx, client, log)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-f.soon: // asked before or during this fetch: answered by it
		default:
		}
		var wait time.Duration
		switch {
		case err != nil && fetched:
			log.Warn("cannot refresh the identity keys; keeping the ones it has", "from", f.target, "retry_in", retry, "error", err)
			wait, retry = retry, min(2*retry, f.timings.maxRetry)
		case err != nil:
			log.Warn("cannot fetch the identity keys; calls carrying an assertion are refused until it can", "from", f.target, "retry_in", retry, "error", err)
			wait, retry = retry, min(2*retry, f.timings.maxRetry)
		default:
			fetched, retry, wait = true, f.timings.retry, age
		}
		if !waitForFetch(ctx, f, time.Now().Add(wait), began.Add(f.timings.soonest)) {
			return
		}
	}
}

// waitForFetch waits until deadline, or until soonest when an unknown kid asks for the
// keys before; false when ctx ends first.
func waitForFetch(ctx context.Context, f *keysFetcher, deadline, soonest time.Time) bool {
	for {
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
			return true
		case <-f.soon:
			timer.Stop()
			if soonest.Before(deadline) {
				deadline = soonest
			}
		}
	}
}

// fetchOnce asks the sidecar for its keys and takes them; it is how long to rely on them.
func (v *verifier) fetchOnce(ctx context.Context, client pb.IdentityKeysServiceClient, log *slog.Logger) (time.Duration, error) {
	f := v.fetcher
	ctx, cancel := context.WithTimeout(ctx, f.timings.timeout)
	defer cancel()
	answer, err := client.GetIdentityKeys(ctx, &pb.GetIdentityKeysRequest{})
	if err != nil {
		s := status.Convert(err)
		return 0, fmt.Errorf("%s: %s", s.Code(), s.Message())
	}
	keys, err := parseJWKS([]byte(answer.GetJwks()))
	switch {
	case errors.Is(err, errNotJWKS):
		return 0, errors.New(`the answer's jwks is not a JWKS (a JSON object with "keys")`)
	case err != nil:
		return 0, fmt.Errorf("the answer's JWKS holds %w", err)
	}
	age := f.maxAge(answer)
	if v.install(answer.GetJwks(), keys) {
		log.Info("identity keys fetched", "from", f.target, "keys", len(keys), "max_age", age)
	} else {
		log.Debug("identity keys unchanged", "from", f.target, "max_age", age)
	}
	return age, nil
}

// maxAge is how long to rely on an answer's keys: its max_age, the default when it has
// none, never less than timings.minAge.
func (f *keysFetcher) maxAge(answer *pb.GetIdentityKeysResponse) time.Duration {
	age := answer.GetMaxAge().AsDuration()
	if age <= 0 {
		return f.timings.defaultAge
	}
	return max(age, f.timings.minAge)
}

// install takes fetched keys; new ones forget the assertions verified before (a key may
// be gone). It says whether the keys changed.
func (v *verifier) install(jwks string, keys map[string]publicKey) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.keys != nil && jwks == v.fetched {
		return false
	}
	v.keys, v.fetched = keys, jwks
	clear(v.verified)
	return true
}
