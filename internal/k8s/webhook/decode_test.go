package webhook

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/herald-lb/herald/internal/k8s/scheme"
)

// TestDecodeErrorsNameObjectAndField: objects that pass the CRD schema but
// not the Go types (a Duration is a plain string in the schema) are
// refused naming the object, the field and its value, where
// controller-runtime's decoder said only `time: invalid duration "abc"`.
// An UPDATE does not decode the old object (Review does not use it), and
// a DELETE reads only its name. (Here the old object is not stored; a
// stored one that does not decode makes Review's read fail: see handler.)
func TestDecodeErrorsNameObjectAndField(t *testing.T) {
	sch, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(sch).WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}).Build()
	hooks := Webhooks(NewReviewer(c, ns, nil), sch)
	const good = `{"apiVersion":"metallb.io/v1beta2","kind":"BGPPeer","metadata":{"name":"p","namespace":"herald-system"},"spec":{"myASN":64512,"peerASN":64500,"peerAddress":"198.51.100.1","holdTime":"90s"}}`
	bad := strings.Replace(good, `"holdTime":"90s"`, `"holdTime":"abc"`, 1)
	badList := strings.Replace(good, `"holdTime":"90s"`, `"nodeSelectors":[{"matchLabels":{"a":"b"}},{"matchLabels":"x"}]`, 1)
	badPool := `{"apiVersion":"metallb.io/v1beta1","kind":"IPAddressPool","metadata":{"name":"pl","namespace":"herald-system"},"spec":{"addresses":["203.0.113.0/28"],"autoAssign":"yes"}}`
	req := func(op admissionv1.Operation, obj, old string) admission.Request {
		r := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Namespace: ns, Name: "p"}}
		if obj != "" {
			r.Object = runtime.RawExtension{Raw: []byte(obj)}
		}
		if old != "" {
			r.OldObject = runtime.RawExtension{Raw: []byte(old)}
		}
		return r
	}
	for _, tc := range []struct {
		name, path string
		req        admission.Request
		want       string // "" = allowed
	}{
		{"create", PathBGPPeer, req(admissionv1.Create, bad, ""),
			`BGPPeer herald-system/p: spec.holdTime "abc": does not decode: time: invalid duration "abc"`},
		{"update", PathBGPPeer, req(admissionv1.Update, bad, good),
			`BGPPeer herald-system/p: spec.holdTime "abc": does not decode: time: invalid duration "abc"`},
		{"list element", PathBGPPeer, req(admissionv1.Create, badList, ""),
			`BGPPeer herald-system/p: spec.nodeSelectors[1].matchLabels "x": does not decode`},
		{"other kind", PathIPAddressPool, req(admissionv1.Create, badPool, ""),
			`IPAddressPool herald-system/pl: spec.autoAssign "yes": does not decode`},
		{"update of an old object that does not decode", PathBGPPeer, req(admissionv1.Update, good, bad), ""},
		{"delete of an object that does not decode", PathBGPPeer, req(admissionv1.Delete, "", bad), ""},
		{"create of a good object", PathBGPPeer, req(admissionv1.Create, good, ""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := hooks[tc.path].Handle(context.Background(), tc.req)
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			switch {
			case tc.want == "" && !resp.Allowed:
				t.Fatalf("refused: %s", msg)
			case tc.want != "" && resp.Allowed:
				t.Fatal("allowed")
			case tc.want != "" && !strings.Contains(msg, tc.want):
				t.Fatalf("message %q, want one containing %q", msg, tc.want)
			}
		})
	}
}
