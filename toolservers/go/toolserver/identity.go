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
	// Verified: the server verified the assertion's signature, issuer, audience and
	// lifetime, and the plain metadata agrees with it.
	Verified bool
	// Claims are the verified assertion's claims (iss, sub, aud, exp, jti ...); nil when
	// not verified.
	Claims map[string]any
}

// IdentityConfig makes a server verify the sidecar's signed identity assertion on every
// call before its handler runs; a call whose assertion fails ends UNAUTHENTICATED.
type IdentityConfig struct {
	// KeysFile holds the sidecar's public keys: a JWKS (`agent-sidecar identity jwks`
	// prints it) or a PEM public key. Reread within a second of a change.
	KeysFile string
	// Audience is this server's name in the sidecar's configuration
	// (tool_servers[].name). Required.
	Audience string
	// Issuer is the issuer the sidecar signs as; empty means DefaultIssuer.
	Issuer string
	// Required refuses calls that carry no assertion; otherwise they run with the plain,
	// unverified identity.
	Required bool
	// Leeway is the clock difference allowed for exp and iat; 0 means DefaultLeeway.
	Leeway time.Duration
}

// WithIdentity verifies every call's identity assertion (see IdentityConfig). A keys
// file that cannot be read makes Serve fail.
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

// verifier checks the identity assertion of each call.
type verifier struct {
	cfg IdentityConfig
	now func() time.Time

	mu       sync.Mutex
	keys     map[string]publicKey // by kid; "" for a PEM key
	seen     fileState
	checked  time.Time
	verified map[string]jwt.MapClaims
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
	v := &verifier{cfg: cfg, now: time.Now, verified: map[string]jwt.MapClaims{}}
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
	claims, err := v.claims(token)
	if err != nil {
		return nil, err
	}
	return checkedAgainst(claims, md, callID)
}

func (v *verifier) claims(token string) (jwt.MapClaims, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reread()
	now := v.now()
	if claims, ok := v.verified[token]; ok {
		exp, _ := claims.GetExpirationTime()
		if exp == nil || now.After(exp.Add(v.cfg.Leeway)) {
			return nil, refused("%s", expired(exp))
		}
		return claims, nil
	}
	claims, err := v.decode(token, now)
	if err != nil {
		return nil, err
	}
	if len(v.verified) >= identityCacheSize {
		clear(v.verified) // one per run in flight, about: forgetting costs a verification
	}
	v.verified[token] = claims
	return claims, nil
}

func (v *verifier) decode(token string, now time.Time) (jwt.MapClaims, error) {
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{"EdDSA", "ES256"}),
		jwt.WithAudience(v.cfg.Audience),
		jwt.WithIssuer(v.cfg.Issuer),
		jwt.WithLeeway(v.cfg.Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	claims := jwt.MapClaims{}
	var unknownKid *string
	_, err := parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		key, ok := v.keys[kid]
		if !ok && len(v.keys) == 1 {
			key, ok = v.keys[""] // a PEM key: no key ids
		}
		if !ok {
			unknownKid = &kid
			return nil, errors.New("unknown key")
		}
		if t.Method.Alg() != key.alg {
			return nil, fmt.Errorf("the key signs %s, not %s", key.alg, t.Method.Alg())
		}
		return key.key, nil
	})
	switch {
	case err == nil:
	case unknownKid != nil:
		kid := *unknownKid
		if len(kid) > 64 {
			kid = kid[:64]
		}
		return nil, refused("the identity assertion is signed by a key this server does not know (kid %q): give it the sidecar's current JWKS", kid)
	case errors.Is(err, jwt.ErrTokenMalformed):
		return nil, refused("the identity assertion is not a JWT")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return nil, refused("the identity assertion's signature does not verify: it was changed on the way, or signed with another key")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return nil, refused("the identity assertion lacks a required claim: %v", err)
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := claims.GetExpirationTime()
		return nil, refused("%s", expired(exp))
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return nil, refused("the identity assertion is for another tool server; this one is %q (tool_servers[].name in the sidecar's configuration)", v.cfg.Audience)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return nil, refused("the identity assertion's issuer is not %q", v.cfg.Issuer)
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return nil, refused("the identity assertion is issued in the future: are the clocks of the sidecar and this server apart by more than the leeway?")
	default:
		return nil, refused("the identity assertion is invalid: %v", err)
	}
	if _, err := claims.GetIssuedAt(); err != nil || claims["iat"] == nil {
		return nil, refused("the identity assertion lacks the claim \"iat\"")
	}
	for _, name := range []string{"sid", "run_id"} {
		if _, ok := claims[name].(string); !ok {
			return nil, refused("the identity assertion lacks the claim %q", name)
		}
	}
	return claims, nil
}

func expired(exp *jwt.NumericDate) string {
	if exp == nil {
		return "the identity assertion has no expiry"
	}
	return "the identity assertion expired at " + exp.UTC().Format("2006-01-02T15:04:05Z")
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

// checkedAgainst is the identity of verified claims, when the plain metadata agrees.
func checkedAgainst(claims jwt.MapClaims, md metadata.MD, callID string) (*Identity, error) {
	principal, _ := claims["sub"].(string)
	asserted := map[string]string{
		PrincipalKey: principal,
		SessionIDKey: claims["sid"].(string),
		RunIDKey:     claims["run_id"].(string),
		CallIDKey:    callID,
	}
	for _, key := range []string{PrincipalKey, SessionIDKey, RunIDKey, CallIDKey} {
		value, ok, err := text(md, key)
		if err != nil {
			return nil, refused("the call's identity metadata is malformed: %v", err)
		}
		if ok && value != asserted[key] {
			if key == CallIDKey {
				return nil, refused("%s contradicts the request's call_id", key)
			}
			return nil, refused("%s contradicts the identity assertion", key)
		}
	}
	var asserts map[string]string
	omitted := true
	if raw, ok := claims["labels"]; ok && raw != nil {
		object, ok := raw.(map[string]any)
		if !ok {
			return nil, refused("the identity assertion's labels are not an object of strings")
		}
		asserts, omitted = make(map[string]string, len(object)), false
		for k, value := range object {
			s, ok := value.(string)
			if !ok {
				return nil, refused("the identity assertion's labels are not an object of strings")
			}
			asserts[k] = s
		}
	}
	stated, present, err := labels(md)
	if err != nil {
		return nil, refused("the call's identity metadata is malformed: %v", err)
	}
	if present && !(stated == nil && omitted || stated != nil && !omitted && maps.Equal(stated, asserts)) {
		return nil, refused("%s contradicts the identity assertion", LabelsKey)
	}
	if asserts == nil {
		asserts = map[string]string{}
	}
	return &Identity{
		Principal:     principal,
		SessionID:     asserted[SessionIDKey],
		RunID:         asserted[RunIDKey],
		CallID:        callID,
		Labels:        asserts,
		LabelsOmitted: omitted,
		Verified:      true,
		Claims:        maps.Clone(claims),
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
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil || set.Keys == nil {
		return nil, state, fmt.Errorf("toolserver: %s is neither a JWKS (a JSON object with \"keys\") nor a PEM key", path)
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
		return nil, state, unusable
	}
	return keys, state, nil
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
