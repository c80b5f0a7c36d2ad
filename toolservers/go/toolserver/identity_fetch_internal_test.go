package toolserver

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecarv1"
)

func TestTheKeysTravelInPlaintextOnlyToThisMachine(t *testing.T) {
	for target, local := range map[string]bool{
		"127.0.0.1:50051": true, "127.0.0.53:50051": true, "[::1]:50051": true, "::1": true,
		"localhost:50051": true, "LOCALHOST:50051": true, "localhost.:50051": true, "localhost": true,
		"unix:/run/agent-sidecar.sock": true, "unix:///run/agent-sidecar.sock": true, "unix-abstract:sidecar": true,
		"dns:///localhost:50051": true, "dns://8.8.8.8/127.0.0.1:50051": true, "passthrough:///127.0.0.1:50051": true,
		"agent-sidecar:50051": false, "10.0.0.7:50051": false, "[2001:db8::1]:50051": false,
		"localhost.example.com:50051": false, "127.0.0.1.example.com:50051": false, "dns:///agent-sidecar:50051": false,
		"dns://127.0.0.1/agent-sidecar:50051": false, "xds:///agent-sidecar": false, "0.0.0.0:50051": false,
	} {
		if got := localTarget(target); got != local {
			t.Errorf("%s: local %v, want %v", target, got, local)
		}
		creds, err := keysCredentials(target, "")
		if err != nil {
			t.Fatal(err)
		}
		want := "tls"
		if local {
			want = "insecure"
		}
		if got := creds.Info().SecurityProtocol; got != want {
			t.Errorf("%s: dialled with %s, want %s", target, got, want)
		}
	}
}

func TestAnAnswerWithoutMaxAgeIsReliedOnFor300Seconds(t *testing.T) {
	f := &keysFetcher{timings: defaultFetchTimings}
	for _, c := range []struct {
		age  *durationpb.Duration
		want time.Duration
	}{
		{nil, 300 * time.Second},
		{durationpb.New(0), 300 * time.Second},
		{durationpb.New(-time.Minute), 300 * time.Second},
		{durationpb.New(time.Millisecond), time.Second},
		{durationpb.New(90 * time.Second), 90 * time.Second},
	} {
		if got := f.maxAge(&pb.GetIdentityKeysResponse{MaxAge: c.age}); got != c.want {
			t.Errorf("max_age %v: relied on for %v, want %v", c.age, got, c.want)
		}
	}
	if d := defaultFetchTimings; d.retry != time.Second || d.maxRetry != 30*time.Second || d.soonest != 10*time.Second {
		t.Errorf("the default waits are %+v, not the rule's 1 s doubling to 30 s and 10 s", d)
	}
}
