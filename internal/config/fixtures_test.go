package config

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
)

const ns = "herald-system"

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }

func pool(name string, addrs ...string) v1beta1.IPAddressPool {
	return v1beta1.IPAddressPool{ObjectMeta: meta(name), Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs}}
}

func l2ad(name string, pools ...string) v1beta1.L2Advertisement {
	return v1beta1.L2Advertisement{ObjectMeta: meta(name), Spec: v1beta1.L2AdvertisementSpec{IPAddressPools: pools}}
}

func bgpad(name string, pools ...string) v1beta1.BGPAdvertisement {
	return v1beta1.BGPAdvertisement{ObjectMeta: meta(name), Spec: v1beta1.BGPAdvertisementSpec{IPAddressPools: pools}}
}

func peer(name string, my, remote uint32, addr string) v1beta2.BGPPeer {
	return v1beta2.BGPPeer{ObjectMeta: meta(name), Spec: v1beta2.BGPPeerSpec{MyASN: my, PeerASN: remote, PeerAddress: addr}}
}

func community(name string, kv ...string) v1beta1.Community {
	c := v1beta1.Community{ObjectMeta: meta(name)}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Spec.Communities = append(c.Spec.Communities, v1beta1.CommunityAlias{Name: kv[i], Value: kv[i+1]})
	}
	return c
}

func node(name string, lbls map[string]string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

func basicAuth(name, password string) corev1.Secret {
	return corev1.Secret{ObjectMeta: meta(name), Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"password": []byte(password)}}
}

func sel(kv ...string) metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return metav1.LabelSelector{MatchLabels: m}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func i32(v int32) *int32 { return &v }

func u32(v uint32) *uint32 { return &v }

// base returns a small valid configuration: two pools (one dual-stack), one
// L2 and one BGP advertisement, one peer, one community alias, two nodes,
// and a password Secret.
func base() Resources {
	return Resources{
		Pools: []v1beta1.IPAddressPool{
			pool("pool-a", "198.51.100.0/24"),
			pool("pool-b", "203.0.113.10-203.0.113.20", "2001:db8::/120"),
		},
		L2Advertisements:  []v1beta1.L2Advertisement{l2ad("l2-a", "pool-a")},
		BGPAdvertisements: []v1beta1.BGPAdvertisement{bgpad("bgp-b", "pool-b")},
		Peers:             []v1beta2.BGPPeer{peer("peer-a", 64500, 64501, "198.51.100.254")},
		Communities:       []v1beta1.Community{community("comms", "no-export", "65535:65281")},
		Nodes: []corev1.Node{
			node("node-1", map[string]string{"zone": "a", "kubernetes.io/hostname": "node-1"}),
			node("node-2", map[string]string{"zone": "b", "kubernetes.io/hostname": "node-2"}),
		},
		Secrets: []corev1.Secret{basicAuth("bgp-pass", "s3cret")},
	}
}
