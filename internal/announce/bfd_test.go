package announce

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/bfd"
	"github.com/herald-lb/herald/internal/config"
)

func TestBFDSessions(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	profiles := []v1beta1.BFDProfile{{
		ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: testNS},
		Spec:       v1beta1.BFDProfileSpec{ReceiveInterval: u32(300), TransmitInterval: u32(300), DetectMultiplier: u32(3)},
	}}
	peers := []v1beta2.BGPPeer{
		sessionPeer("a-single", func(s *v1beta2.BGPPeerSpec) { s.BFDProfile = "fast" }),
		sessionPeer("b-none", func(s *v1beta2.BGPPeerSpec) { s.PeerAddress = "198.51.100.2" }),
		sessionPeer("c-multihop", func(s *v1beta2.BGPPeerSpec) {
			s.PeerAddress, s.SourceAddress, s.EBGPMultiHop, s.BFDProfile = "203.0.113.1", "198.51.100.10", true, "fast"
		}),
		sessionPeer("d-other-rack", func(s *v1beta2.BGPPeerSpec) {
			s.PeerAddress, s.BFDProfile = "198.51.100.4", "fast"
			s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"rack": "b"}}}
		}),
	}
	snap, err := config.Build(config.Resources{Peers: peers, BFDProfiles: profiles}, config.Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	params := bfd.Params{ReceiveInterval: 300 * time.Millisecond, TransmitInterval: 300 * time.Millisecond, DetectMultiplier: 3, MinimumTTL: 254}
	want := []BFDSession{
		{Peer: "a-single", Address: netip.MustParseAddr("198.51.100.1"), Params: params, Profile: "fast"},
		{Peer: "c-multihop", Address: netip.MustParseAddr("203.0.113.1"), Local: netip.MustParseAddr("198.51.100.10"), Multihop: true, Params: params, Profile: "fast"},
	}
	if got := BFDSessions(snap, labels.Set{"rack": "a"}); !reflect.DeepEqual(got, want) {
		t.Errorf("BFDSessions(rack a) =\n%+v\nwant\n%+v", got, want)
	}
	if got := BFDSessions(snap, labels.Set{"rack": "b"}); len(got) != 3 || got[2].Peer != "d-other-rack" {
		t.Errorf("BFDSessions(rack b) = %+v, want a-single, c-multihop, d-other-rack", got)
	}
	if got := BFDSessions(nil, nil); got != nil {
		t.Errorf("BFDSessions(nil) = %v", got)
	}
}
