package webhook

import (
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/config"
)

// Webhook paths, as MetalLB serves them (manifests/webhook uses the same).
const (
	PathIPAddressPool    = "/validate-metallb-io-v1beta1-ipaddresspool"
	PathL2Advertisement  = "/validate-metallb-io-v1beta1-l2advertisement"
	PathBGPAdvertisement = "/validate-metallb-io-v1beta1-bgpadvertisement"
	PathCommunity        = "/validate-metallb-io-v1beta1-community"
	PathBFDProfile       = "/validate-metallb-io-v1beta1-bfdprofile"
	PathBGPPeer          = "/validate-metallb-io-v1beta2-bgppeer"
)

// Webhooks returns the admission webhook of every kind, keyed by its path.
// scheme must know api/v1beta1 and api/v1beta2 (the request objects are
// decoded with it). BGPPeer is validated as v1beta2 only: v1beta1 is not
// served by the CRD (manifests/crds), so no request arrives in that version
// (were it served, matchPolicy Equivalent sends v1beta1 requests here
// converted to v1beta2).
func Webhooks(r *Reviewer, scheme *runtime.Scheme) map[string]*admission.Webhook {
	return map[string]*admission.Webhook{
		PathIPAddressPool: webhookFor(scheme, &validator[v1beta1.IPAddressPool, *v1beta1.IPAddressPool]{
			r: r, kind: config.KindIPAddressPool,
			items: func(res *config.Resources) *[]v1beta1.IPAddressPool { return &res.Pools },
		}),
		PathL2Advertisement: webhookFor(scheme, &validator[v1beta1.L2Advertisement, *v1beta1.L2Advertisement]{
			r: r, kind: config.KindL2Advertisement,
			items: func(res *config.Resources) *[]v1beta1.L2Advertisement { return &res.L2Advertisements },
		}),
		PathBGPAdvertisement: webhookFor(scheme, &validator[v1beta1.BGPAdvertisement, *v1beta1.BGPAdvertisement]{
			r: r, kind: config.KindBGPAdvertisement,
			items: func(res *config.Resources) *[]v1beta1.BGPAdvertisement { return &res.BGPAdvertisements },
		}),
		PathCommunity: webhookFor(scheme, &validator[v1beta1.Community, *v1beta1.Community]{
			r: r, kind: config.KindCommunity,
			items: func(res *config.Resources) *[]v1beta1.Community { return &res.Communities },
		}),
		PathBFDProfile: webhookFor(scheme, &validator[v1beta1.BFDProfile, *v1beta1.BFDProfile]{
			r: r, kind: config.KindBFDProfile,
			items: func(res *config.Resources) *[]v1beta1.BFDProfile { return &res.BFDProfiles },
		}),
		PathBGPPeer: webhookFor(scheme, &validator[v1beta2.BGPPeer, *v1beta2.BGPPeer]{
			r: r, kind: config.KindBGPPeer,
			items: func(res *config.Resources) *[]v1beta2.BGPPeer { return &res.Peers },
		}),
	}
}

// validator adapts Reviewer to controller-runtime's admission.Validator for
// one kind: items selects that kind's list in config.Resources.
type validator[T any, PT interface {
	*T
	client.Object
}] struct {
	r     *Reviewer
	kind  string
	items func(*config.Resources) *[]T
}

func (v *validator[T, PT]) change(op Operation, obj PT) Change {
	return Change{
		Op: op, Kind: v.kind, Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Apply: func(res *config.Resources) {
			l := v.items(res)
			if op == Delete {
				*l = remove[T, PT](*l, obj.GetName())
			} else {
				*l = put[T, PT](*l, obj)
			}
		},
	}
}

// webhookFor returns the admission webhook of v's kind (see handler).
func webhookFor[T any, PT interface {
	*T
	client.Object
}](scheme *runtime.Scheme, v *validator[T, PT]) *admission.Webhook {
	return &admission.Webhook{Handler: &handler[T, PT]{v: v, decoder: admission.NewDecoder(scheme)}}
}
