package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// explainConversion wraps next, controller-runtime's CRD conversion
// webhook (PathConvert): a ConversionReview with an object that does not
// decode into its Go type is answered with a failure that names the object
// and the field, as the admission webhooks do (explainDecode):
//
//	BGPPeer herald-system/p: spec.holdTime "abc": does not decode: time: invalid duration "abc"
//
// next alone answers with the decoder's error only (`time: invalid
// duration "abc"`), which is what a user applying a metallb.io/v1beta1
// BGPPeer saw, since the API server converts it before any admission
// webhook judges it. Reviews that decode, and requests that are not a
// ConversionReview of a kind the scheme knows, go to next unchanged.
func explainConversion(scheme *runtime.Scheme, next http.Handler) http.Handler {
	dec := admission.NewDecoder(scheme)
	decodes := func(gvk schema.GroupVersionKind) func([]byte) error {
		return func(raw []byte) error {
			obj, err := scheme.New(gvk)
			if err != nil {
				return err
			}
			return dec.DecodeRaw(runtime.RawExtension{Raw: raw}, obj)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, fmt.Sprintf("read conversion review: %v", err), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var review apiextensionsv1.ConversionReview
		if json.Unmarshal(body, &review) != nil || review.Request == nil {
			next.ServeHTTP(w, r)
			return
		}
		for _, o := range review.Request.Objects {
			var tm metav1.TypeMeta
			if json.Unmarshal(o.Raw, &tm) != nil {
				continue
			}
			gvk := tm.GroupVersionKind()
			if !scheme.Recognizes(gvk) {
				continue
			}
			d := decodes(gvk)
			if derr := d(o.Raw); derr != nil {
				writeConversionFailure(w, review, explainDecode(gvk.Kind, o.Raw, derr, d))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// writeConversionFailure answers review with a failed result whose message
// is err's (the API server shows it to the client, after "conversion
// webhook for <group/version, kind> failed: ").
func writeConversionFailure(w http.ResponseWriter, review apiextensionsv1.ConversionReview, err error) {
	out := apiextensionsv1.ConversionReview{
		TypeMeta: review.TypeMeta,
		Response: &apiextensionsv1.ConversionResponse{
			UID:    review.Request.UID,
			Result: metav1.Status{Status: metav1.StatusFailure, Message: err.Error()},
		},
	}
	w.Header().Set("Content-Type", "application/json")
	if eerr := json.NewEncoder(w).Encode(out); eerr != nil {
		http.Error(w, fmt.Sprintf("write conversion review: %v", eerr), http.StatusInternalServerError)
	}
}
