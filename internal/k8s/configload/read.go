package configload

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/config"
)

// Read lists every object config.Build reads: the metallb.io objects and the
// Secrets in namespace, and the cluster's Nodes. c is normally
// the manager's cache-backed client, so Read costs no API request. A list
// error is returned wrapped with the kind that failed; callers treat it as an
// infrastructure error (nothing is rejected, nothing changes).
func Read(ctx context.Context, c client.Reader, namespace string) (config.Resources, error) {
	var (
		r       config.Resources
		pools   v1beta1.IPAddressPoolList
		l2s     v1beta1.L2AdvertisementList
		bgps    v1beta1.BGPAdvertisementList
		peers   v1beta2.BGPPeerList
		comms   v1beta1.CommunityList
		bfds    v1beta1.BFDProfileList
		secrets corev1.SecretList
		nodes   corev1.NodeList
	)
	in := client.InNamespace(namespace)
	lists := []struct {
		kind string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"IPAddressPools", &pools, []client.ListOption{in}},
		{"L2Advertisements", &l2s, []client.ListOption{in}},
		{"BGPAdvertisements", &bgps, []client.ListOption{in}},
		{"BGPPeers", &peers, []client.ListOption{in}},
		{"Communities", &comms, []client.ListOption{in}},
		{"BFDProfiles", &bfds, []client.ListOption{in}},
		{"Secrets", &secrets, []client.ListOption{in}},
		{"Nodes", &nodes, nil},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list, l.opts...); err != nil {
			return r, fmt.Errorf("list %s: %w", l.kind, err)
		}
	}
	r.Pools = pools.Items
	r.L2Advertisements = l2s.Items
	r.BGPAdvertisements = bgps.Items
	r.Peers = peers.Items
	r.Communities = comms.Items
	r.BFDProfiles = bfds.Items
	r.Secrets = secrets.Items
	r.Nodes = nodes.Items
	return r, nil
}
