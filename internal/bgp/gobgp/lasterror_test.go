package gobgp

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	apb "google.golang.org/protobuf/types/known/anypb"

	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/poll"
)

func TestNotificationText(t *testing.T) {
	for _, tc := range []struct {
		dir           string
		code, subcode uint8
		communication string
		want          string
	}{
		{"received", 6, 2, "maintenance", `notification received: code 6(cease) subcode 2(administrative shutdown): "maintenance"`},
		{"received", 6, 2, "<nil>", "notification received: code 6(cease) subcode 2(administrative shutdown)"},
		{"sent", 2, 2, "", "notification sent: code 2(open) subcode 2(bad peer as)"},
		{"received", 4, 0, "", "notification received: code 4(hold timer expired) subcode 0(undefined)"},
	} {
		if got := notificationText(tc.dir, tc.code, tc.subcode, tc.communication); got != tc.want {
			t.Errorf("notificationText(%s, %d, %d, %q) = %q, want %q", tc.dir, tc.code, tc.subcode, tc.communication, got, tc.want)
		}
	}
}

// TestLastErrorAndReceived: the router's administrative shutdown (Cease
// subcode 2 with an RFC 8203 communication) becomes the session's
// LastError, in the state callback and in PeerStates, and stays there once
// the session is Established again; the prefixes the router sends are
// counted in Received.
func TestLastErrorAndReceived(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN)
	origin, _ := apb.New(&api.OriginAttribute{Origin: 0})
	nh, _ := apb.New(&api.NextHopAttribute{NextHop: "127.0.0.1"})
	for i := range 3 {
		nlri, _ := apb.New(&api.IPAddressPrefix{Prefix: fmt.Sprintf("203.0.113.%d", i), PrefixLen: 32})
		p := &api.Path{Family: familyV4, Nlri: nlri, Pattrs: []*apb.Any{origin, nh}}
		if _, err := r.srv.AddPath(context.Background(), &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p}); err != nil {
			t.Fatalf("router AddPath: %v", err)
		}
	}
	states := make(chan bgp.PeerState, 64)
	s := newSpeaker(t, Options{OnPeerState: func(st bgp.PeerState) {
		select {
		case states <- st:
		default:
		}
	}})
	ctx := context.Background()
	if err := s.SetPeers(ctx, []bgp.PeerConfig{r.peerConfig("r", ourASN)}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "r")
	poll.Until(t, 20*time.Second, "3 prefixes received", func() bool { return stateOf(s, "r").Received == 3 })
	if st := stateOf(s, "r"); st.LastError != "" {
		t.Errorf("LastError %q before any error, want none", st.LastError)
	}

	if err := r.srv.ShutdownPeer(ctx, &api.ShutdownPeerRequest{Address: "127.0.0.1", Communication: "maintenance"}); err != nil {
		t.Fatal(err)
	}
	const want = `notification received: code 6(cease) subcode 2(administrative shutdown): "maintenance"`
	var down bgp.PeerState
	poll.Until(t, 20*time.Second, "a state change with the shutdown as LastError", func() bool {
		select {
		case down = <-states:
		default:
			return false
		}
		return down.State != bgp.StateEstablished && down.LastError == want
	})
	if down.LastErrorTime.IsZero() {
		t.Error("LastErrorTime is zero")
	}
	if err := r.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "Established again", func() bool { return stateOf(s, "r").EstablishedCount >= 2 })
	if got := stateOf(s, "r").LastError; !strings.HasPrefix(got, "notification received") {
		t.Errorf("LastError after re-establishing = %q, want the shutdown kept", got)
	}
}

// TestConnectErrorIsLastError: a session whose TCP connection is refused
// (nobody listens on the port) gets "connect: ... connection refused" as
// LastError, although gobgp reports it only as a debug message and the
// speaker's logger is at info level; the retries keep its first time.
func TestConnectErrorIsLastError(t *testing.T) {
	skipShort(t)
	port := freePort(t, "127.0.0.1")
	s := newSpeaker(t, Options{})
	p := bgp.PeerConfig{Name: "closed", Address: netip.MustParseAddr("127.0.0.1"), Port: uint16(port),
		MyASN: ourASN, PeerASN: routerASN, RouterID: netip.MustParseAddr(ourRouterID), ConnectTime: time.Second}
	if err := s.SetPeers(context.Background(), []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	var first bgp.PeerState
	poll.Until(t, 30*time.Second, "connection refused as LastError", func() bool {
		first = stateOf(s, "closed")
		return strings.HasPrefix(first.LastError, "connect: ") && strings.Contains(first.LastError, "connection refused")
	})
	established := stateOf(s, "closed").EstablishedCount
	if established != 0 {
		t.Fatalf("established %d times against a closed port", established)
	}
	t.Logf("LastError %q", first.LastError)
}

// TestMissingVRFDeviceIsLastError: a peer whose vrf names no device on the
// node is configured (gobgp does not check the name), and every connection
// attempt fails before a packet leaves the host: SO_BINDTODEVICE returns
// ENODEV, and the session's LastError (BGPSessionState's lastError) says
// so, naming the VRF. This is what a BGPPeer with spec.vrf does on a node without that VRF
// and on a kernel without VRF support (CONFIG_NET_VRF, as on the machine
// the lab runs on: the VRF itself is not tested on the wire).
func TestMissingVRFDeviceIsLastError(t *testing.T) {
	skipShort(t)
	port := freePort(t, "127.0.0.1")
	s := newSpeaker(t, Options{})
	p := bgp.PeerConfig{Name: "novrf", Address: netip.MustParseAddr("127.0.0.1"), Port: uint16(port), VRF: "herald-novrf",
		MyASN: ourASN, PeerASN: routerASN, RouterID: netip.MustParseAddr(ourRouterID), ConnectTime: time.Second}
	if err := s.SetPeers(context.Background(), []bgp.PeerConfig{p}); err != nil {
		t.Fatal(err)
	}
	var st bgp.PeerState
	poll.Until(t, 30*time.Second, "no such device as LastError", func() bool {
		st = stateOf(s, "novrf")
		return strings.HasPrefix(st.LastError, "connect: ") && strings.Contains(st.LastError, "no such device")
	})
	if want := `(spec.vrf "herald-novrf": no such VRF device on this node, or a kernel without VRF support)`; !strings.HasSuffix(st.LastError, want) {
		t.Errorf("LastError %q does not end in %q", st.LastError, want)
	}
	if st.State == bgp.StateEstablished || st.EstablishedCount != 0 {
		t.Fatalf("session %+v without its VRF device", st)
	}
	t.Logf("LastError %q", st.LastError)
}
