package toolserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The metadata the sidecar sends with every tool call (docs/tool-servers.md, "Who the
// call serves"). Text values are percent-encoded UTF-8; the labels are a JSON object in
// a binary entry.
const (
	PrincipalKey = "x-agent-principal"
	SessionIDKey = "x-agent-session-id"
	RunIDKey     = "x-agent-run-id"
	CallIDKey    = "x-agent-call-id"
	LabelsKey    = "x-agent-labels-bin"
	AssertionKey = "x-agent-identity"
	// DefaultIssuer is the issuer the sidecar signs as unless configured otherwise.
	DefaultIssuer = "agent-sidecar"
	// DefaultLeeway is how far apart the clocks of the sidecar and the server may be.
	DefaultLeeway = 10 * time.Second
)

const (
	identityCacheSize = 1024        // assertions remembered as verified
	identityReread    = time.Second // between checks of the keys file
)

// Identity is who a call serves, as the sidecar says; with Verified, as the signature of
// its assertion proves. Without Verified anything that reaches the server could have
// sent it: use it for logs and defaults, not for decisions.
type Identity struct {
	// Principal is the principal's name; empty for the sidecar's anonymous principal.
	Principal string
	// SessionID is the session's id as the sidecar's caller knows it.
	SessionID string
	// RunID is the run (turn) the call belongs to.
	RunID string
	// CallID is the call's id.
	CallID string
	// Labels are the session's labels; empty when it has none or they were too large
	// to send (LabelsOmitted).
	Labels map[string]string
	// LabelsOmitted: the session has labels, too many to send (over 2 KiB of JSON).
	LabelsOmitted bool
	// Verified: the server verified the assertion by the rule every verifier follows
	// (docs/tool-servers.md): its size, shape, header, key, signature, the claims' presence
	// and types, issuer, audience and lifetime, and that the plain metadata agrees with it.
	Verified bool
	// Claims are the verified assertion's claims (iss, sub, aud, exp, jti ...) as JSON
	// decodes them, numbers as json.Number (exact); nil when not verified.
	Claims map[string]any
}

// IdentityConfig makes a server verify the sidecar's signed identity assertion on every
// call before its handler runs; a call whose assertion fails ends UNAUTHENTICATED.
type IdentityConfig struct {
	// KeysFile holds the sidecar's public keys: a JWKS (`agent-sidecar identity jwks`
	// prints it) or a PEM public key. Reread within a second of a change. Set exactly one
	// of KeysFile and KeysFrom.
	KeysFile string
	// KeysFrom is a sidecar's gRPC target ("agent-sidecar:50051", "127.0.0.1:50051",
	// "unix:/run/agent-sidecar.sock") to fetch the keys from
	// (agentsidecar.v1.IdentityKeysService) instead of a file: in the background from the
	// start of Serve, again every max_age the sidecar answers with, and soon (at most
	// once every 10 s) after an assertion names a key it does not know. Until the first
	// answer a call carrying an assertion is refused (UNAUTHENTICATED, "the identity keys
	// are not fetched yet"); a failed fetch is retried after 1 s, doubling to 30 s, and
	// a failed refresh keeps the keys the server has. The keys travel in plaintext only
	// to this machine (a loopback address, localhost, a unix: socket); any other target
	// is dialled with TLS.
	KeysFrom string
	// KeysCA is a PEM file of the certificate authorities KeysFrom's TLS certificate is
	// verified against; empty means the system's roots. With KeysCA even a local target
	// is dialled with TLS. A file that cannot be read makes Serve fail.
	KeysCA string
	// Audience is this server's name in the sidecar's configuration
	// (tool_servers[].name). Required.
	Audience string
	// Issuer is the issuer the sidecar signs as; empty means DefaultIssuer.
	Issuer string
	// Required refuses calls that carry no assertion; otherwise they run with the plain,
	// unverified identity.
	Required bool
	// Leeway is the clock difference allowed for exp, iat and nbf; 0 means DefaultLeeway.
	Leeway time.Duration
}

// WithIdentity verifies every call's identity assertion (see IdentityConfig). A keys
// file (or KeysCA file) that cannot be read makes Serve fail.
func WithIdentity(cfg IdentityConfig) Option {
	return func(s *Server) { s.identity = &cfg }
}

type identityKey struct{}

// IdentityFrom is the identity of the call whose context ctx is: the verified one when
// the server verifies, else the plain metadata's. An error says the metadata is
// malformed (it did not come from a sidecar).
func IdentityFrom(ctx context.Context) (*Identity, error) {
	if id, ok := ctx.Value(identityKey{}).(*Identity); ok {
		return id, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return plainIdentity(md, "")
}

// Identity is who the call serves; see IdentityFrom.
func (c *Call) Identity() (*Identity, error) {
	if c.identity == nil && c.ctx == nil { // a Call made outside a server, in a unit test
		return &Identity{CallID: c.ID, Labels: map[string]string{}}, nil
	}
	if c.identity == nil {
		id, err := IdentityFrom(c.ctx)
		if err != nil {
			return nil, err
		}
		if id.CallID == "" {
			id.CallID = c.ID
		}
		c.identity = id
	}
	return c.identity, nil
}

// entry is the one value of key: absent, or an error when it occurs more than once.
func entry(md metadata.MD, key string) (string, bool, error) {
	values := md.Get(key)
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
		return values[0], true, nil
	}
	return "", false, fmt.Errorf("the metadata holds %s more than once", key)
}

func text(md metadata.MD, key string) (string, bool, error) {
	value, ok, err := entry(md, key)
	if err != nil || !ok {
		return "", ok, err
	}
	decoded, err := url.PathUnescape(value)
	if err != nil {
		return "", false, fmt.Errorf("%s is not percent-encoded text", key)
	}
	return decoded, true, nil
}

// labels decodes the labels entry: {} when absent, nil when null (too large to send).
func labels(md metadata.MD) (map[string]string, bool, error) {
	value, ok, err := entry(md, LabelsKey)
	if err != nil || !ok {
		return map[string]string{}, ok, err
	}
	var decoded map[string]string
	if err := json.Unmarshal([]byte(value), &decoded); err != nil {
		return nil, true, fmt.Errorf("%s is not a JSON object of strings", LabelsKey)
	}
	return decoded, true, nil
}

func plainIdentity(md metadata.MD, callID string) (*Identity, error) {
	id := &Identity{CallID: callID}
	var err error
	if id.Principal, _, err = text(md, PrincipalKey); err != nil {
		return nil, err
	}
	if id.SessionID, _, err = text(md, SessionIDKey); err != nil {
		return nil, err
	}
	if id.RunID, _, err = text(md, RunIDKey); err != nil {
		return nil, err
	}
	if call, ok, err := text(md, CallIDKey); err != nil {
		return nil, err
	} else if ok {
		id.CallID = call
	}
	if id.Labels, _, err = labels(md); err != nil {
		return nil, err
	}
	if id.Labels == nil {
		id.Labels, id.LabelsOmitted = map[string]string{}, true
	}
	if _, _, err := entry(md, AssertionKey); err != nil {
		return nil, err
	}
	return id, nil
}

// publicKey is one key the sidecar may sign with, and the algorithm it signs.
type publicKey struct {
	alg string
	key any
}

// The limits of the rule every verifier follows (docs/tool-servers.md, "The rule every
// verifier follows").
const (
	// maxAssertionSize bounds a token: the sidecar's are about 1 KB, 4 KB with the most
	// labels it sends.
	maxAssertionSize = 6144
	// maxNumericDate is 9999-12-31T23:59:59Z, the last second a time claim may name.
	maxNumericDate = 253402300799
)

// requiredClaims are the claims every assertion holds, in the order they are checked.
var requiredClaims = []string{"iss", "aud", "exp", "iat", "sid", "run_id"}

// assertion is what a verified token asserts, remembered while it is valid.
type assertion struct {
	claims    map[string]any
	exp       int64
	principal string
	sessionID string
	runID     string
	labels    map[string]string // nil: the token has no labels claim (too large to send)
}

// verifier checks the identity assertion of each call.
type verifier struct {
	cfg IdentityConfig
	now func() time.Time

	// fetcher, when the keys come from a sidecar (KeysFrom); nil for a keys file.
	fetcher *keysFetcher

	mu       sync.Mutex
	keys     map[string]publicKey // by kid; "" for a PEM key; nil until fetched
	seen     fileState
	checked  time.Time
	fetched  string // the JWKS the keys were parsed from, when fetched
	verified map[string]*assertion
}

type fileState struct {
	mod  time.Time
	size int64
}

func newVerifier(cfg IdentityConfig) (*verifier, error) {
	if cfg.Audience == "" {
		return nil, errors.New("toolserver: IdentityConfig.Audience is required: this server's name in the sidecar's configuration (tool_servers[].name)")
	}
	if cfg.Issuer == "" {
		cfg.Issuer = DefaultIssuer
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = DefaultLeeway
	}
	v := &verifier{cfg: cfg, now: time.Now, verified: map[string]*assertion{}}
	switch {
	case cfg.KeysFile != "" && cfg.KeysFrom != "":
		return nil, errors.New("toolserver: IdentityConfig takes one of KeysFile (the sidecar's keys as a file) and KeysFrom (a sidecar to fetch them from), not both")
	case cfg.KeysFile == "" && cfg.KeysFrom == "":
		return nil, errors.New("toolserver: IdentityConfig needs KeysFile (the sidecar's keys as a file) or KeysFrom (a sidecar to fetch them from)")
	case cfg.KeysCA != "" && cfg.KeysFrom == "":
		return nil, errors.New("toolserver: IdentityConfig.KeysCA verifies the sidecar the keys are fetched from: it needs KeysFrom")
	case cfg.KeysFrom != "":
		fetcher, err := newKeysFetcher(cfg.KeysFrom, cfg.KeysCA)
		if err != nil {
			return nil, err
		}
		v.fetcher = fetcher
		return v, nil
	}
	keys, state, err := loadKeys(cfg.KeysFile)
	if err != nil {
		return nil, err
	}
	v.keys, v.seen, v.checked = keys, state, time.Now()
	return v, nil
}

// refused is a call whose identity does not verify.
func refused(format string, args ...any) error {
	return status.Errorf(codes.Unauthenticated, format, args...)
}

// verify is the call's identity, or an UNAUTHENTICATED status saying why it has none.
func (v *verifier) verify(ctx context.Context, callID string) (*Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	token, ok, err := entry(md, AssertionKey)
	if err != nil {
		return nil, refused("the call's identity metadata is malformed: %v", err)
	}
	if !ok {
		if v.cfg.Required {
			return nil, refused("the call carries no identity assertion (%s); this tool server requires one: the sidecar signs them with auth.tool_assertion", AssertionKey)
		}
		id, err := plainIdentity(md, callID)
		if err != nil {
			return nil, refused("the call's identity metadata is malformed: %v", err)
		}
		return id, nil
	}
	asserted, err := v.assertion(token)
	if err != nil {
		return nil, err
	}
	return checkedAgainst(asserted, md, callID)
}

// assertion is what token asserts: remembered when verified before (and not expired
// since), else verified by steps 1 to 11 of the rule.
func (v *verifier) assertion(token string) (*assertion, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.fetcher == nil {
		v.reread()
	} else if v.keys == nil {
		return nil, refused("the identity keys are not fetched yet from %s: this tool server fetches them from the sidecar in the background; try again shortly", v.cfg.KeysFrom)
	}
	now := v.now()
	if cached, ok := v.verified[token]; ok {
		if expiredBy(cached.exp, now, v.cfg.Leeway) {
			return nil, refused("%s", expired(cached.exp))
		}
		return cached, nil
	}
	asserted, err := v.decode(token, now)
	if err != nil {
		return nil, err
	}
	if len(v.verified) >= identityCacheSize {
		clear(v.verified) // one per run in flight, about: forgetting costs a verification
	}
	v.verified[token] = asserted
	return asserted, nil
}

// decode verifies token by the rule's steps 1 to 11, in their order: the first that fails
// refuses it. Only the signature (step 6) is golang-jwt's; the rest is this package's, so
// no library's defaults decide. Messages never hold the token.
func (v *verifier) decode(token string, now time.Time) (*assertion, error) {
	// 1. size
	if len(token) > maxAssertionSize {
		return nil, refused("the identity assertion is over %d bytes (it has %d): the sidecar's are about 1 KB", maxAssertionSize, len(token))
	}
	// 2. shape
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, refused("the identity assertion is not a JWT: it has %d parts, not three", len(parts))
	}
	header, ok := jsonObject(parts[0])
	if !ok {
		return nil, refused("the identity assertion is not a JWT: its header is not a base64url JSON object")
	}
	payload, ok := jsonObject(parts[1])
	if !ok {
		return nil, refused("the identity assertion is not a JWT: its payload is not a base64url JSON object")
	}
	signature, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, refused("the identity assertion is not a JWT: its signature is not base64url")
	}
	// 3. header
	alg, _ := header["alg"].(string)
	if alg != "EdDSA" && alg != "ES256" {
		return nil, refused("the identity assertion's header is refused: its alg (%s) is neither EdDSA nor ES256", shown(header["alg"]))
	}
	if _, ok := header["crit"]; ok {
		return nil, refused("the identity assertion's header is refused: it has crit, and no extension is understood")
	}
	if _, ok := header["b64"]; ok {
		return nil, refused("the identity assertion's header is refused: it has b64 (RFC 7797's unencoded payloads are not taken)")
	}
	// 4. key
	key, ok := v.keys[""] // a PEM file's one key, which takes any kid
	if kid, isText := header["kid"].(string); !ok && isText && kid != "" {
		key, ok = v.keys[kid] // a JWKS's keys, each under its kid
	}
	if !ok {
		if v.fetcher != nil {
			v.fetcher.refreshSoon()
			return nil, refused("the identity assertion is signed by a key this server does not know (kid %s): it asks %s for the keys again", shown(header["kid"]), v.cfg.KeysFrom)
		}
		return nil, refused("the identity assertion is signed by a key this server does not know (kid %s): give it the sidecar's current JWKS", shown(header["kid"]))
	}
	// 5. header and key
	if key.alg != alg {
		return nil, refused("the identity assertion's header is refused: its alg is %s, and the key (kid %s) signs %s", alg, shown(header["kid"]), key.alg)
	}
	// 6. signature
	method := jwt.GetSigningMethod(alg)
	if method == nil || method.Verify(parts[0]+"."+parts[1], signature, key.key) != nil {
		return nil, refused("the identity assertion's signature does not verify: it was changed on the way, or signed with another key")
	}
	// 7. claims present
	for _, name := range requiredClaims {
		if _, ok := payload[name]; !ok {
			return nil, refused("the identity assertion lacks the claim %q", name)
		}
	}
	// 8. claim types
	times := map[string]int64{}
	for _, name := range []string{"exp", "iat", "nbf"} {
		value, ok := payload[name]
		if !ok {
			continue
		}
		if times[name], ok = numericDate(value); !ok {
			return nil, refused("the identity assertion's claim %q is not a whole number of seconds from 0 to %d", name, maxNumericDate)
		}
	}
	texts := map[string]string{}
	for _, name := range []string{"iss", "sub", "sid", "run_id"} {
		value, ok := payload[name]
		if !ok {
			continue
		}
		if texts[name], ok = value.(string); !ok {
			return nil, refused("the identity assertion's claim %q is not a string", name)
		}
	}
	audiences, ok := audience(payload["aud"])
	if !ok {
		return nil, refused("the identity assertion's claim \"aud\" is neither a string nor a non-empty array of strings")
	}
	var labels map[string]string
	if value, ok := payload["labels"]; ok {
		if labels, ok = stringObject(value); !ok {
			return nil, refused("the identity assertion's claim \"labels\" is not an object of strings")
		}
	}
	// 9. issuer
	if texts["iss"] != v.cfg.Issuer {
		return nil, refused("the identity assertion's issuer is not %q", v.cfg.Issuer)
	}
	// 10. audience
	if !slices.Contains(audiences, v.cfg.Audience) {
		return nil, refused("the identity assertion is for another tool server; this one is %q (tool_servers[].name in the sidecar's configuration)", v.cfg.Audience)
	}
	// 11. lifetime
	leeway := v.cfg.Leeway
	if expiredBy(times["exp"], now, leeway) {
		return nil, refused("%s", expired(times["exp"]))
	}
	if time.Unix(times["iat"], 0).Add(-leeway).After(now) {
		return nil, refused("the identity assertion is issued in the future (at %s): are the clocks of the sidecar and this server apart by more than the leeway?", instant(times["iat"]))
	}
	if nbf, ok := times["nbf"]; ok && time.Unix(nbf, 0).Add(-leeway).After(now) {
		return nil, refused("the identity assertion is not valid before %s", instant(nbf))
	}
	return &assertion{
		claims:    payload,
		exp:       times["exp"],
		principal: texts["sub"],
		sessionID: texts["sid"],
		runID:     texts["run_id"],
		labels:    labels,
	}, nil
}

// jsonObject is the JSON object a base64url part of a token holds, its numbers as
// json.Number (exact, whatever their size).
func jsonObject(part string) (map[string]any, bool) {
	data, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil || !json.Valid(data) {
		return nil, false
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var object map[string]any
	if err := decoder.Decode(&object); err != nil || object == nil { // nil: JSON null
		return nil, false
	}
	return object, true
}

// numericDate is a time claim's seconds: a JSON number with a whole value from 0 to
// maxNumericDate, however written (1800000000, 1800000000.0, 1.8e9).
func numericDate(value any) (int64, bool) {
	number, ok := value.(json.Number)
	if !ok {
		return 0, false
	}
	return wholeSeconds(string(number))
}

// wholeSeconds reads a JSON number exactly (no float rounds 1800000000.0000001 to a whole
// number, and no exponent is expanded past the range).
func wholeSeconds(number string) (int64, bool) {
	mantissa, exponentText, hasExponent := strings.Cut(strings.ToLower(number), "e")
	negative := strings.HasPrefix(mantissa, "-")
	whole, fraction, _ := strings.Cut(strings.TrimPrefix(mantissa, "-"), ".")
	digits := strings.TrimLeft(whole+fraction, "0")
	if digits == "" {
		return 0, true // zero, however written
	}
	if negative {
		return 0, false
	}
	var exponent int64
	if hasExponent {
		var err error
		if exponent, err = strconv.ParseInt(exponentText, 10, 32); err != nil {
			return 0, false // a fraction or a value far past the range
		}
	}
	exponent -= int64(len(fraction))
	significant := strings.TrimRight(digits, "0")
	exponent += int64(len(digits) - len(significant))
	if exponent < 0 || int64(len(significant))+exponent > int64(len(strconv.Itoa(maxNumericDate))) {
		return 0, false // a fraction, or over the range
	}
	seconds, err := strconv.ParseInt(significant+strings.Repeat("0", int(exponent)), 10, 64)
	if err != nil || seconds > maxNumericDate {
		return 0, false
	}
	return seconds, true
}

// audience is the aud claim's names: a string, or a non-empty array of strings.
func audience(value any) ([]string, bool) {
	switch aud := value.(type) {
	case string:
		return []string{aud}, true
	case []any:
		if len(aud) == 0 {
			return nil, false
		}
		names := make([]string, len(aud))
		for i, name := range aud {
			var ok bool
			if names[i], ok = name.(string); !ok {
				return nil, false
			}
		}
		return names, true
	}
	return nil, false
}

// stringObject is a JSON object whose values are all strings.
func stringObject(value any) (map[string]string, bool) {
	object, ok := value.(map[string]any)
	if !ok {
		return nil, false
	}
	texts := make(map[string]string, len(object))
	for k, item := range object {
		s, ok := item.(string)
		if !ok {
			return nil, false
		}
		texts[k] = s
	}
	return texts, true
}

// shown is a header parameter for a message: quoted and cut short, as the sender wrote
// anything in it.
func shown(value any) string {
	switch value := value.(type) {
	case nil:
		return "absent"
	case string:
		if len(value) > 64 {
			value = value[:64]
		}
		return strconv.Quote(value)
	}
	return "not a string"
}

func expiredBy(exp int64, now time.Time, leeway time.Duration) bool {
	return time.Unix(exp, 0).Add(leeway).Before(now)
}

func instant(seconds int64) string {
	return time.Unix(seconds, 0).UTC().Format("2006-01-02T15:04:05Z")
}

func expired(exp int64) string {
	return "the identity assertion expired at " + instant(exp)
}

// reread loads the keys file again when it changed (a rotation); half-written files
// keep the old keys. Called with v.mu held.
func (v *verifier) reread() {
	now := time.Now()
	if now.Sub(v.checked) < identityReread {
		return
	}
	v.checked = now
	info, err := os.Stat(v.cfg.KeysFile)
	if err != nil || (fileState{info.ModTime(), info.Size()}) == v.seen {
		return
	}
	keys, state, err := loadKeys(v.cfg.KeysFile)
	if err != nil {
		return
	}
	v.keys, v.seen = keys, state
	clear(v.verified) // a key may be gone
}

// checkedAgainst is the identity a verified assertion asserts, when the plain metadata
// agrees with it (step 12 of the rule).
func checkedAgainst(asserted *assertion, md metadata.MD, callID string) (*Identity, error) {
	claimed := map[string]string{
		PrincipalKey: asserted.principal,
		SessionIDKey: asserted.sessionID,
		RunIDKey:     asserted.runID,
		CallIDKey:    callID,
	}
	for _, key := range []string{PrincipalKey, SessionIDKey, RunIDKey, CallIDKey} {
		value, ok, err := text(md, key)
		if err != nil {
			return nil, refused("the call's identity metadata is malformed: %v", err)
		}
		if ok && value != claimed[key] {
			if key == CallIDKey {
				return nil, refused("%s contradicts the request's call_id", key)
			}
			return nil, refused("%s contradicts the identity assertion", key)
		}
	}
	omitted := asserted.labels == nil
	stated, present, err := labels(md)
	if err != nil {
		return nil, refused("the call's identity metadata is malformed: %v", err)
	}
	if present && !(stated == nil && omitted || stated != nil && !omitted && maps.Equal(stated, asserted.labels)) {
		return nil, refused("%s contradicts the identity assertion", LabelsKey)
	}
	own := maps.Clone(asserted.labels)
	if own == nil {
		own = map[string]string{}
	}
	return &Identity{
		Principal:     asserted.principal,
		SessionID:     asserted.sessionID,
		RunID:         asserted.runID,
		CallID:        callID,
		Labels:        own,
		LabelsOmitted: omitted,
		Verified:      true,
		Claims:        maps.Clone(asserted.claims),
	}, nil
}

// loadKeys reads a JWKS (keys by kid) or a PEM public key (under "").
func loadKeys(path string) (map[string]publicKey, fileState, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fileState{}, fmt.Errorf("toolserver: cannot read the identity keys %s: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fileState{}, fmt.Errorf("toolserver: cannot read the identity keys %s: %w", path, err)
	}
	state := fileState{info.ModTime(), info.Size()}
	unusable := fmt.Errorf("toolserver: %s holds no usable key: an Ed25519 (EdDSA) or ECDSA P-256 (ES256) public key as PEM, or a JWKS as 'agent-sidecar identity jwks' prints it (each key with a kid)", path)
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN")) {
		block, _ := pem.Decode(data)
		if block == nil {
			return nil, state, unusable
		}
		parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, state, unusable
		}
		key, ok := supported(parsed)
		if !ok {
			return nil, state, unusable
		}
		return map[string]publicKey{"": key}, state, nil
	}
	keys, err := parseJWKS(data)
	switch {
	case errors.Is(err, errNotJWKS):
		return nil, state, fmt.Errorf("toolserver: %s is neither a JWKS (a JSON object with \"keys\") nor a PEM key", path)
	case err != nil:
		return nil, state, unusable
	}
	return keys, state, nil
}

// The ways a JWKS is refused.
var (
	errNotJWKS     = errors.New(`not a JWKS (a JSON object with "keys")`)
	errNoUsableKey = errors.New("no usable key: an Ed25519 (EdDSA) or ECDSA P-256 (ES256) key, each with a kid")
)

// parseJWKS is the keys of a JWKS by kid, a file's or a sidecar's answer alike: its
// Ed25519 and P-256 keys that have a kid (others are skipped); errNotJWKS, or
// errNoUsableKey when none is left.
func parseJWKS(data []byte) (map[string]publicKey, error) {
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil || set.Keys == nil {
		return nil, errNotJWKS
	}
	keys := map[string]publicKey{}
	for _, jwk := range set.Keys {
		kid, _ := jwk["kid"].(string)
		if kid == "" {
			continue
		}
		if key, ok := fromJWK(jwk); ok {
			keys[kid] = key
		}
	}
	if len(keys) == 0 {
		return nil, errNoUsableKey
	}
	return keys, nil
}

func supported(key any) (publicKey, bool) {
	switch k := key.(type) {
	case ed25519.PublicKey:
		return publicKey{"EdDSA", k}, true
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return publicKey{"ES256", k}, true
		}
	}
	return publicKey{}, false
}

// fromJWK is the key of an OKP Ed25519 or EC P-256 JWK; other kinds are skipped.
func fromJWK(jwk map[string]any) (publicKey, bool) {
	field := func(name string) []byte {
		s, _ := jwk[name].(string)
		data, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
		if err != nil {
			return nil
		}
		return data
	}
	alg, _ := jwk["alg"].(string)
	switch {
	case jwk["kty"] == "OKP" && jwk["crv"] == "Ed25519" && (alg == "" || alg == "EdDSA"):
		x := field("x")
		if len(x) != ed25519.PublicKeySize {
			return publicKey{}, false
		}
		return publicKey{"EdDSA", ed25519.PublicKey(x)}, true
	case jwk["kty"] == "EC" && jwk["crv"] == "P-256" && (alg == "" || alg == "ES256"):
		x, y := field("x"), field("y")
		if len(x) != 32 || len(y) != 32 {
			return publicKey{}, false
		}
		key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return publicKey{}, false
		}
		return publicKey{"ES256", key}, true
	}
	return publicKey{}, false
}
