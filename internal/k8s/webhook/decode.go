package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// handler is the admission.Handler of one kind: it decodes the request's
// object and hands it to the validator. It replaces controller-runtime's
// admission.WithValidator, whose decode errors name neither the object nor
// the field (`time: invalid duration "abc"`). It decodes only what Review
// uses: not the old object of an UPDATE, only the name of a DELETE's.
// (A stored object that does not decode, stored while the webhook was not
// running, still makes Review's read of the stored configuration fail, so
// every change is refused until it is removed with the webhook off.)
type handler[T any, PT interface {
	*T
	client.Object
}] struct {
	v       *validator[T, PT]
	decoder admission.Decoder
}

// Handle implements admission.Handler. CREATE and UPDATE decode the new
// object (a failure is refused as a decodeError); DELETE reads only the
// old object's metadata (namespace and name), so any stored object can be
// deleted.
func (h *handler[T, PT]) Handle(ctx context.Context, req admission.Request) admission.Response {
	var (
		warnings admission.Warnings
		err      error
	)
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
		obj := PT(new(T))
		if derr := h.decoder.DecodeRaw(req.Object, obj); derr != nil {
			return admission.Errored(http.StatusBadRequest, explainDecode(h.v.kind, req.Object.Raw, derr, h.decodes))
		}
		op := Create
		if req.Operation == admissionv1.Update {
			op = Update
		}
		warnings, err = h.v.r.Review(ctx, h.v.change(op, obj))
	case admissionv1.Delete:
		var m metav1.PartialObjectMetadata
		if derr := json.Unmarshal(req.OldObject.Raw, &m); derr != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("%s %s/%s: the deleted object is not a JSON object: %w", h.v.kind, req.Namespace, req.Name, derr))
		}
		obj := PT(new(T))
		obj.SetNamespace(m.Namespace)
		obj.SetName(m.Name)
		warnings, err = h.v.r.Review(ctx, h.v.change(Delete, obj))
	default:
		return admission.Allowed("") // CONNECT: nothing to judge
	}
	if err != nil {
		return admission.Denied(err.Error()).WithWarnings(warnings...)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// decodes reports whether raw decodes into the handler's type.
func (h *handler[T, PT]) decodes(raw []byte) error {
	return h.decoder.DecodeRaw(runtime.RawExtension{Raw: raw}, PT(new(T)))
}

// explainDecode turns the error of decoding raw (an object of kind) into
// one that names the object and, when one field alone fails, the field
// and its value, in config.ValidationError's shape:
//
//	BGPPeer herald-system/p: spec.holdTime "abc": does not decode: time: invalid duration "abc"
//
// Such an object passed the CRD's schema (the API server checks it first),
// which says less than the Go type (a Duration is a string there). decodes
// is tried on raw reduced to each field alone.
func explainDecode(kind string, raw []byte, err error, decodes func([]byte) error) error {
	var u map[string]any
	if json.Unmarshal(raw, &u) != nil {
		return fmt.Errorf("%s: not a JSON object: %w", kind, err)
	}
	meta, _ := u["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		name = ns + "/" + name
	}
	base := map[string]any{"apiVersion": u["apiVersion"], "kind": u["kind"]}
	for _, top := range []string{"spec", "status", "metadata"} {
		v, ok := u[top]
		if !ok {
			continue
		}
		if field, value, ferr := firstBadLeaf(top, v, func(doc any) error {
			b := map[string]any{top: doc}
			for k, x := range base {
				b[k] = x
			}
			j, merr := json.Marshal(b)
			if merr != nil {
				return merr
			}
			return decodes(j)
		}); field != "" {
			return fmt.Errorf("%s %s: %s %s: does not decode: %w", kind, name, field, value, ferr)
		}
	}
	return fmt.Errorf("%s %s: does not decode: %w", kind, name, err)
}

// firstBadLeaf walks v (the value at path) depth first, keys in order, and
// returns the path, the JSON value and the error of the first leaf that
// fails try when it is the only content under path; "" when none does.
// try receives the value of path reduced to that leaf.
func firstBadLeaf(path string, v any, try func(any) error) (field, value string, err error) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			f, val, e := firstBadLeaf(path+"."+k, x[k], func(child any) error { return try(map[string]any{k: child}) })
			if f != "" {
				return f, val, e
			}
		}
		return "", "", nil
	case []any:
		for i, el := range x {
			f, val, e := firstBadLeaf(path+"["+strconv.Itoa(i)+"]", el, func(child any) error { return try([]any{child}) })
			if f != "" {
				return f, val, e
			}
		}
		return "", "", nil
	}
	if e := try(v); e != nil {
		if str, ok := v.(string); ok {
			return path, strconv.Quote(str), e
		}
		b, merr := json.Marshal(v)
		if merr != nil {
			return path, "", errors.Join(e, merr)
		}
		return path, strconv.Quote(string(b)), e
	}
	return "", "", nil
}
