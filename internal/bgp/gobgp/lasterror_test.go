package gobgp

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	gobgppkt "github.com/osrg/gobgp/v3/pkg/packet/bgp"
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

// logSpeaker is a Speaker with one applied peer "r" at 192.0.2.1, enough
// for the gobgp log hooks (gobgpWarning, gobgpInfo, gobgpDebug).
func logSpeaker() *Speaker {
	return &Speaker{
		byKey:   map[string]string{"192.0.2.1": "r"},
		runtime: map[string]*peerRuntime{"r": {state: bgp.StateActive}},
	}
}

// TestNotificationFromOpenErrorIsLastError: a NOTIFICATION gobgp sends
// because of the router's OPEN (wrong AS, bad BGP identifier, unacceptable
// hold time) is logged by gobgp (fsm.go, sendNotificationFromErrorMsg)
// with its *MessageError as Data and without Code and Subcode; it
// becomes LastError with gobgp's explanation.
func TestNotificationFromOpenErrorIsLastError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{gobgppkt.NewMessageError(gobgppkt.BGP_ERROR_OPEN_MESSAGE_ERROR, gobgppkt.BGP_ERROR_SUB_BAD_PEER_AS, nil, "as number mismatch expected 64999, received 64500"),
			"notification sent: code 2(open) subcode 2(bad peer as): as number mismatch expected 64999, received 64500"},
		{gobgppkt.NewMessageError(gobgppkt.BGP_ERROR_OPEN_MESSAGE_ERROR, gobgppkt.BGP_ERROR_SUB_BAD_BGP_IDENTIFIER, nil, "bad BGP identifier"),
			"notification sent: code 2(open) subcode 3(bad bgp identifier): bad BGP identifier"},
		{gobgppkt.NewMessageError(gobgppkt.BGP_ERROR_OPEN_MESSAGE_ERROR, gobgppkt.BGP_ERROR_SUB_UNACCEPTABLE_HOLD_TIME, nil, "hold time is too short"),
			"notification sent: code 2(open) subcode 6(unacceptable hold time): hold time is too short"},
	} {
		s := logSpeaker()
		s.gobgpWarning("sent notification", gobgplog.Fields{"Topic": "Peer", "Key": "192.0.2.1", "Data": tc.err})
		if got := s.runtime["r"].lastError; got != tc.want {
			t.Errorf("LastError %q, want %q", got, tc.want)
		}
		if s.runtime["r"].lastErrorTime.IsZero() {
			t.Error("LastErrorTime is zero")
		}
	}
	// With Code and Subcode (written by the session's sender) as before.
	s := logSpeaker()
	s.gobgpWarning("received notification", gobgplog.Fields{"Topic": "Peer", "Key": "192.0.2.1", "Code": uint8(6), "Subcode": uint8(2), "Communicated-Reason": "maintenance", "Data": []byte{}})
	if got, want := s.runtime["r"].lastError, `notification received: code 6(cease) subcode 2(administrative shutdown): "maintenance"`; got != want {
		t.Errorf("LastError %q, want %q", got, want)
	}
}

// TestOwnPeerReplacementIsNoLastError: "Peer Down" with reason "dying" is
// gobgp's neighbor deleted or its server stopped, which only Herald does
// (a changed BGPPeer recreates the neighbor, a router ID change restarts
// gobgp): gobgp logs it after DeletePeer returned, when the new neighbor
// with the same address may be registered. It is not the router's error.
func TestOwnPeerReplacementIsNoLastError(t *testing.T) {
	s := logSpeaker()
	s.gobgpInfo("Peer Down", gobgplog.Fields{"Topic": "Peer", "Key": "192.0.2.1", "State": "BGP_FSM_ESTABLISHED", "Reason": "dying"})
	if got := s.runtime["r"].lastError; got != "" {
		t.Errorf("LastError %q after Herald replaced its own neighbor, want none", got)
	}
	s.gobgpInfo("Peer Down", gobgplog.Fields{"Topic": "Peer", "Key": "192.0.2.1", "State": "BGP_FSM_ESTABLISHED", "Reason": "hold-timer-expired"})
	if got, want := s.runtime["r"].lastError, "session down: hold-timer-expired"; got != want {
		t.Errorf("LastError %q, want %q", got, want)
	}
}

// TestWrongPeerASNIsLastError: against a real gobgp router, a peerASN that
// is not the router's makes gobgp send an OPEN error NOTIFICATION, which
// becomes LastError; correcting the ASN (Herald recreates its neighbor,
// the router then sees Herald's side as "dying") leaves no error of
// Herald's own making once the session is Established.
func TestWrongPeerASNIsLastError(t *testing.T) {
	skipShort(t)
	r := newRouter(t, routerASN, "198.51.100.254", "127.0.0.1")
	r.addPeer(t, "127.0.0.1", ourASN)
	s := newSpeaker(t, Options{})
	ctx := context.Background()
	wrong := r.peerConfig("r", ourASN)
	wrong.PeerASN = 64999
	if err := s.SetPeers(ctx, []bgp.PeerConfig{wrong}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("notification sent: code 2(open) subcode 2(bad peer as): as number mismatch expected 64999, received %d", routerASN)
	poll.Until(t, 30*time.Second, "the AS mismatch as LastError", func() bool { return stateOf(s, "r").LastError == want })

	if err := s.SetPeers(ctx, []bgp.PeerConfig{r.peerConfig("r", ourASN)}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "r")
	// Replaced once more while Established: gobgp logs the old neighbor's
	// "Peer Down" (dying) after the new one is registered.
	changed := r.peerConfig("r", ourASN)
	changed.HoldTime = 12 * time.Second
	if err := s.SetPeers(ctx, []bgp.PeerConfig{changed}); err != nil {
		t.Fatal(err)
	}
	waitEstablished(t, s, "r")
	if got := stateOf(s, "r").LastError; got != "" {
		t.Errorf("LastError %q after Herald recreated its neighbor, want none", got)
	}
}
