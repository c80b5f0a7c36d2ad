package toolserver

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The cases of the rule every verifier follows (docs/tool-servers.md), shared by the
// Python, Go, TypeScript and Java libraries; python -m tests.security.identity_vectors
// writes them.
const identityVectors = "../../../tests/security/identity-vectors.json"

type identityVectorFile struct {
	Now      int64             `json:"now"`
	Audience string            `json:"audience"`
	Issuer   string            `json:"issuer"`
	Leeway   float64           `json:"leeway"`
	CallID   string            `json:"call_id"`
	JWKS     json.RawMessage   `json:"jwks"`
	Reasons  map[string]string `json:"reasons"`
	Cases    []struct {
		Name     string      `json:"name"`
		Token    *string     `json:"token"`
		Metadata [][2]string `json:"metadata"`
		Refused  string      `json:"refused"`
		Verified *struct {
			Principal     string            `json:"principal"`
			SessionID     string            `json:"session_id"`
			RunID         string            `json:"run_id"`
			CallID        string            `json:"call_id"`
			Labels        map[string]string `json:"labels"`
			LabelsOmitted bool              `json:"labels_omitted"`
		} `json:"verified"`
	} `json:"cases"`
}

func TestTheIdentityVectorsAllFollowTheRule(t *testing.T) {
	data, err := os.ReadFile(identityVectors)
	if err != nil {
		t.Fatal(err)
	}
	var vectors identityVectorFile
	if err := json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors.Cases) < 60 {
		t.Fatalf("%s holds %d cases: read the whole file?", identityVectors, len(vectors.Cases))
	}
	keys := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(keys, vectors.JWKS, 0o600); err != nil {
		t.Fatal(err)
	}
	newOne := func(t *testing.T) *verifier {
		t.Helper()
		v, err := newVerifier(IdentityConfig{
			KeysFile: keys, Audience: vectors.Audience, Issuer: vectors.Issuer, Required: true,
			Leeway: time.Duration(vectors.Leeway * float64(time.Second)),
		})
		if err != nil {
			t.Fatal(err)
		}
		v.now = func() time.Time { return time.Unix(vectors.Now, 0) }
		return v
	}
	shared := newOne(t) // its cache remembers what earlier cases verified
	for _, c := range vectors.Cases {
		t.Run(c.Name, func(t *testing.T) {
			md := metadata.MD{}
			for _, pair := range c.Metadata {
				md.Append(pair[0], pair[1]) // a -bin entry's value is its bytes: the UTF-8 here
			}
			if c.Token != nil {
				md.Append(AssertionKey, *c.Token)
			}
			ctx := metadata.NewIncomingContext(context.Background(), md)
			// A fresh verifier, then the shared one twice: the second time from its cache
			// when the first verified the token.
			for round, v := range []*verifier{newOne(t), shared, shared} {
				id, err := v.verify(ctx, vectors.CallID)
				if c.Refused != "" {
					phrase, known := vectors.Reasons[c.Refused]
					if !known {
						t.Fatalf("the reason %q is not in the file's reasons", c.Refused)
					}
					message := status.Convert(err).Message()
					if status.Code(err) != codes.Unauthenticated || !strings.Contains(message, phrase) {
						t.Fatalf("round %d: got %v (%+v), want UNAUTHENTICATED with %q", round, err, id, phrase)
					}
					if c.Token != nil && len(*c.Token) > 16 && strings.Contains(message, *c.Token) {
						t.Fatalf("round %d: the message holds the token: %s", round, message)
					}
					continue
				}
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				want := c.Verified
				if want == nil {
					t.Fatal("the case is neither verified nor refused")
				}
				if !id.Verified || id.Principal != want.Principal || id.SessionID != want.SessionID ||
					id.RunID != want.RunID || id.CallID != want.CallID ||
					id.Labels == nil || !maps.Equal(id.Labels, want.Labels) || id.LabelsOmitted != want.LabelsOmitted {
					t.Fatalf("round %d: identity %+v, want %+v", round, id, *want)
				}
				if id.Claims["jti"] != "j-1" || id.Claims["aud"] == nil {
					t.Fatalf("round %d: claims %v", round, id.Claims)
				}
			}
		})
	}
}

func TestATimeClaimIsAWholeNumberOfSecondsInRange(t *testing.T) {
	for number, want := range map[string]int64{
		"0": 0, "-0": 0, "0.0": 0, "0e999999999999": 0, "1800000000": 1800000000,
		"1800000000.0": 1800000000, "1.8e9": 1800000000, "18E+8": 1800000000,
		"180000000000e-2": 1800000000, "253402300799": 253402300799, "2.53402300799e11": 253402300799,
	} {
		if got, ok := wholeSeconds(number); !ok || got != want {
			t.Errorf("%s: got %d %v, want %d", number, got, ok, want)
		}
	}
	for _, number := range []string{
		"-1", "-1e3", "1800000000.5", "1800000000.0000000000001", "1.5", "1e300", "1e-300",
		"100000000000000000000", "253402300800", "1e12", "1e99999999999", "18e-1",
	} {
		if got, ok := wholeSeconds(number); ok {
			t.Errorf("%s: got %d, want a refusal", number, got)
		}
	}
	for _, value := range []any{"1800000000", true, nil, 1800000000.0, []any{json.Number("1")}} {
		if got, ok := numericDate(value); ok {
			t.Errorf("%#v: got %d, want a refusal", value, got)
		}
	}
}

func TestARememberedAssertionStillExpires(t *testing.T) {
	data, err := os.ReadFile(identityVectors)
	if err != nil {
		t.Fatal(err)
	}
	var vectors identityVectorFile
	if err := json.Unmarshal(data, &vectors); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(keys, vectors.JWKS, 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := newVerifier(IdentityConfig{KeysFile: keys, Audience: vectors.Audience, Issuer: vectors.Issuer, Required: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(vectors.Now, 0)
	v.now = func() time.Time { return now }
	first := vectors.Cases[0]
	if first.Name != "an EdDSA assertion" || first.Token == nil {
		t.Fatalf("the first case is %q, not the EdDSA assertion", first.Name)
	}
	token := *first.Token // exp is now + 295
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(AssertionKey, token))
	if _, err := v.verify(ctx, vectors.CallID); err != nil {
		t.Fatal(err)
	}
	if _, remembered := v.verified[token]; !remembered {
		t.Fatal("the verified assertion is not remembered")
	}
	now = now.Add(300 * time.Second) // past exp, within the leeway
	if _, err := v.verify(ctx, vectors.CallID); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	_, err = v.verify(ctx, vectors.CallID)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), "expired at 2027-01-15T08:04:55Z") {
		t.Fatalf("got %v, want it expired", err)
	}
}
