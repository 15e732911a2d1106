package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/k8s/scheme"
)

const ns = "herald-system"

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }

func testPool(name string, addrs ...string) *v1beta1.IPAddressPool {
	return &v1beta1.IPAddressPool{ObjectMeta: meta(name), Spec: v1beta1.IPAddressPoolSpec{Addresses: addrs}}
}

// TestReviewDecisions covers the decision rules of Review on stored states
// the webhook itself would not let in (the rules for already-invalid
// objects, namespace termination, read failures). The stored objects are
// served by controller-runtime's in-memory client; the validation is the
// real config.Build.
func TestReviewDecisions(t *testing.T) {
	sch, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	homeNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	terminating := homeNS.DeepCopy()
	terminating.Finalizers = []string{"kubernetes"}
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	comms := &v1beta1.Community{ObjectMeta: meta("comms"), Spec: v1beta1.CommunitySpec{
		Communities: []v1beta1.CommunityAlias{{Name: "prefer", Value: "64500:300"}},
	}}
	adUsingAlias := &v1beta1.BGPAdvertisement{ObjectMeta: meta("ad"), Spec: v1beta1.BGPAdvertisementSpec{Communities: []string{"prefer"}}}
	// stale overlaps lab: stored before the webhook existed.
	lab, stale := testPool("lab", "198.51.100.200-198.51.100.250"), testPool("stale", "198.51.100.244/30")

	cases := []struct {
		name     string
		stored   []client.Object
		change   func(r *Reviewer) (warnings []string, err error)
		wantErr  string // "" = admitted
		wantWarn string // substring of one warning
	}{{
		name:   "unrelated stored error does not block, it is a warning",
		stored: []client.Object{homeNS, lab, stale},
		change: func(r *Reviewer) ([]string, error) {
			return review(r, Create, config.KindL2Advertisement, &v1beta1.L2Advertisement{ObjectMeta: meta("l2")})
		},
		wantWarn: `already has errors unrelated to this change (Herald keeps running its last valid configuration): IPAddressPool herald-system/stale`,
	}, {
		name:   "updating the invalid object without fixing it is refused",
		stored: []client.Object{homeNS, lab, stale},
		change: func(r *Reviewer) ([]string, error) {
			p := stale.DeepCopy()
			p.Labels = map[string]string{"touched": "yes"}
			return review(r, Update, config.KindIPAddressPool, p)
		},
		wantErr: `IPAddressPool herald-system/stale: spec.addresses[0] "198.51.100.244/30": overlaps with`,
	}, {
		name:   "a new error on another object is refused",
		stored: []client.Object{homeNS, lab},
		change: func(r *Reviewer) ([]string, error) {
			return review(r, Create, config.KindIPAddressPool, testPool("stale", "198.51.100.244/30"))
		},
		wantErr: "overlaps with IPAddressPool herald-system/lab",
	}, {
		name:   "deleting a used Community alias is refused",
		stored: []client.Object{homeNS, comms, adUsingAlias},
		change: func(r *Reviewer) ([]string, error) {
			return review(r, Delete, config.KindCommunity, comms)
		},
		wantErr: `deleting Community herald-system/comms would leave a dangling reference: BGPAdvertisement herald-system/ad`,
	}, {
		name:   "deleting it while the namespace terminates is admitted",
		stored: []client.Object{terminating, comms, adUsingAlias},
		change: func(r *Reviewer) ([]string, error) {
			return review(r, Delete, config.KindCommunity, comms)
		},
	}, {
		// MetalLB admits it (its webhook ignores aliases, so that the
		// order of creation does not matter); Herald admits it too, with a
		// warning naming the object, field and alias (before, a typo was
		// admitted silently and only ConfigurationState said why).
		name:   "an alias no Community defines is admitted with a warning",
		stored: []client.Object{homeNS},
		change: func(r *Reviewer) ([]string, error) {
			return review(r, Create, config.KindBGPAdvertisement, adUsingAlias)
		},
		wantWarn: `BGPAdvertisement herald-system/ad: spec.communities[0] "prefer": no Community object defines the alias "prefer" (a community is AA:NN (RFC 1997) or large:AA:BB:CC (RFC 8092), else the name of an alias in a Community object: until a Community defines it`,
	}, {
		name:   "an alias a Community defines is admitted",
		stored: []client.Object{homeNS, comms},
		change: func(r *Reviewer) ([]string, error) {
			return review(r, Create, config.KindBGPAdvertisement, adUsingAlias)
		},
	}, {
		name:   "a stored advertisement with an undefined alias blocks only itself",
		stored: []client.Object{homeNS, adUsingAlias},
		change: func(r *Reviewer) ([]string, error) {
			return review(r, Create, config.KindIPAddressPool, testPool("other", "203.0.113.0/28"))
		},
	}, {
		name:   "deleting an object outside the namespace is admitted",
		stored: []client.Object{homeNS},
		change: func(r *Reviewer) ([]string, error) {
			p := testPool("x", "bad")
			p.Namespace = "default"
			return review(r, Delete, config.KindIPAddressPool, p)
		},
	}, {
		name:   "creating one is refused",
		stored: []client.Object{homeNS},
		change: func(r *Reviewer) ([]string, error) {
			p := testPool("x", "203.0.113.0/28")
			p.Namespace = "default"
			return review(r, Create, config.KindIPAddressPool, p)
		},
		wantErr: `IPAddressPool default/x: Herald only reads metallb.io objects in namespace "herald-system"`,
	}, {
		name:   "warnings about the object are returned",
		stored: []client.Object{homeNS},
		change: func(r *Reviewer) ([]string, error) {
			p := &v1beta2.BGPPeer{ObjectMeta: meta("legacy"), Spec: v1beta2.BGPPeerSpec{MyASN: 64512, PeerASN: 64500, PeerAddress: "198.51.100.1", DisableMP: true}}
			return review(r, Update, config.KindBGPPeer, p)
		},
		wantWarn: "BGPPeer herald-system/legacy: spec.disableMP: deprecated and ignored",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(sch).WithObjects(tc.stored...).Build()
			warnings, err := tc.change(NewReviewer(c, ns, nil))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.wantWarn != "" && !strings.Contains(strings.Join(warnings, "\n"), tc.wantWarn) {
				t.Errorf("warnings %q lack %q", warnings, tc.wantWarn)
			}
		})
	}
}

// TestReviewReadFailure: when the stored objects cannot be listed, the
// change is refused (failurePolicy Fail semantics), naming the cause.
func TestReviewReadFailure(t *testing.T) {
	r := NewReviewer(failingReader{}, ns, nil)
	_, err := review(r, Create, config.KindIPAddressPool, testPool("p", "203.0.113.0/28"))
	if err == nil || !strings.Contains(err.Error(), "read the stored configuration") || !errors.Is(err, errUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

var errUnavailable = errors.New("API server unavailable")

type failingReader struct{}

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errUnavailable
}

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errUnavailable
}

// review runs the validator of obj's kind as the admission handler would.
func review[T any, PT interface {
	*T
	client.Object
}](r *Reviewer, op Operation, kind string, obj PT) ([]string, error) {
	v := &validator[T, PT]{r: r, kind: kind, items: itemsOf[T](kind)}
	w, err := r.Review(context.Background(), v.change(op, obj))
	return w, err
}

// itemsOf returns the Resources list of kind (as Webhooks wires it).
func itemsOf[T any](kind string) func(*config.Resources) *[]T {
	return func(res *config.Resources) *[]T {
		var l any
		switch kind {
		case config.KindIPAddressPool:
			l = &res.Pools
		case config.KindL2Advertisement:
			l = &res.L2Advertisements
		case config.KindBGPAdvertisement:
			l = &res.BGPAdvertisements
		case config.KindBGPPeer:
			l = &res.Peers
		case config.KindCommunity:
			l = &res.Communities
		case config.KindBFDProfile:
			l = &res.BFDProfiles
		}
		return l.(*[]T)
	}
}
