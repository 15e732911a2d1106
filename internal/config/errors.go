package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Object kinds used in errors and warnings.
const (
	KindIPAddressPool    = "IPAddressPool"
	KindL2Advertisement  = "L2Advertisement"
	KindBGPAdvertisement = "BGPAdvertisement"
	KindBGPPeer          = "BGPPeer"
	KindCommunity        = "Community"
	KindBFDProfile       = "BFDProfile"
	KindNode             = "Node"
	KindSecret           = "Secret"
)

// ValidationError reports an object that is invalid as written: it will stay
// invalid until the object (or one it conflicts with) is edited.
//
// Error() renders as
//
//	IPAddressPool herald-system/pool-a: spec.addresses[1] "10.0.0.5-10.0.0.1": range start is after end
//
// which is the text users see from kubectl apply (webhook) and in the
// ConfigurationState status.
type ValidationError struct {
	Kind      string // object kind, e.g. "IPAddressPool"
	Namespace string // object namespace ("" for cluster-scoped objects)
	Name      string // object name
	Field     string // JSON field path, e.g. "spec.addresses[1]"; "" for the object as a whole
	Value     string // offending value as written, quoted in Error(); may be ""
	Rule      string // the broken rule, lower case, no trailing period
}

func (e *ValidationError) Error() string {
	return render(e.Kind, e.Namespace, e.Name, e.Field, e.Value, e.Rule)
}

// TransientError reports a reference to an object that does not exist (yet):
// a password Secret, a Community alias, or the speaker's own Node. The
// configuration may become valid without any edit once the object appears,
// so callers retry instead of reporting the configuration as invalid.
type TransientError struct {
	Kind      string
	Namespace string
	Name      string
	Field     string
	Value     string
	Rule      string
	// Missing is the kind of the object that does not exist: KindCommunity
	// (an alias), KindSecret, KindBFDProfile or KindNode. It is not part of
	// Error().
	Missing string
}

func (e *TransientError) Error() string {
	return render(e.Kind, e.Namespace, e.Name, e.Field, e.Value, e.Rule)
}

func render(kind, ns, name, field, value, rule string) string {
	var b strings.Builder
	b.WriteString(kind)
	b.WriteByte(' ')
	if ns != "" {
		b.WriteString(ns)
		b.WriteByte('/')
	}
	b.WriteString(name)
	b.WriteString(": ")
	if field != "" {
		b.WriteString(field)
		if value != "" {
			fmt.Fprintf(&b, " %q", value)
		}
		b.WriteString(": ")
	} else if value != "" {
		fmt.Fprintf(&b, "%q: ", value)
	}
	b.WriteString(rule)
	return b.String()
}

// IsTransient reports whether err is non-nil and consists only of
// *TransientError values (directly or joined with errors.Join). A mix of
// transient and validation errors is not transient: the configuration is
// invalid regardless of what appears later.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	all := true
	walk(err, func(e error) {
		var t *TransientError
		if !errors.As(e, &t) {
			all = false
		}
	})
	return all
}

// Split separates err (as returned by Build) into its validation and
// transient parts. Errors of other types are ignored.
func Split(err error) (invalid []*ValidationError, transient []*TransientError) {
	walk(err, func(e error) {
		var (
			v *ValidationError
			t *TransientError
		)
		switch {
		case errors.As(e, &v):
			invalid = append(invalid, v)
		case errors.As(e, &t):
			transient = append(transient, t)
		}
	})
	return invalid, transient
}

// walk calls fn for every leaf of an error tree: it descends through
// errors.Join (Unwrap() []error) and through wrapping (fmt.Errorf with %w),
// so that a caller may wrap Build's error and still use IsTransient/Split.
func walk(err error, fn func(error)) {
	switch u := err.(type) { //nolint:errorlint // walk is the unwrapping: it needs this level's own type
	case nil:
		return
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walk(e, fn)
		}
		return
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			walk(inner, fn)
			return
		}
	}
	fn(err)
}

// objRef identifies the object currently being parsed; it builds errors and
// warnings about it.
type objRef struct {
	kind, ns, name string
}

func (o objRef) invalid(field, value, rule string, args ...any) *ValidationError {
	if len(args) > 0 {
		rule = fmt.Sprintf(rule, args...)
	}
	return &ValidationError{Kind: o.kind, Namespace: o.ns, Name: o.name, Field: field, Value: value, Rule: rule}
}

// transient reports a reference from field to a missing object of kind
// missing.
func (o objRef) transient(missing, field, value, rule string, args ...any) *TransientError {
	if len(args) > 0 {
		rule = fmt.Sprintf(rule, args...)
	}
	return &TransientError{Kind: o.kind, Namespace: o.ns, Name: o.name, Field: field, Value: value, Rule: rule, Missing: missing}
}

func (o objRef) String() string {
	if o.ns == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.ns + "/" + o.name
}

// problems accumulates every error and warning of one Build call, so that a
// user sees all mistakes at once instead of fixing them one by one.
type problems struct {
	invalid         []*ValidationError
	transient       []*TransientError
	warnings        []string
	ignoreTransient bool
}

func (p *problems) add(e *ValidationError) { p.invalid = append(p.invalid, e) }

func (p *problems) addTransient(e *TransientError) {
	if !p.ignoreTransient {
		p.transient = append(p.transient, e)
	}
}

// hasTransient reports a transient error about the object kind/name.
func (p *problems) hasTransient(kind, name string) bool {
	return slices.ContainsFunc(p.transient, func(e *TransientError) bool { return e.Kind == kind && e.Name == name })
}

// droppableKinds are the kinds whose transient errors Options.DropTransient
// turns into a left-out object.
var droppableKinds = map[string]bool{KindBGPPeer: true, KindBGPAdvertisement: true}

// takeDroppable removes and returns the transient errors of droppable
// objects, sorted, when they are the only problems; otherwise it returns
// nil and leaves every error in place (the build fails).
func (p *problems) takeDroppable() []*TransientError {
	if len(p.invalid) > 0 || len(p.transient) == 0 {
		return nil
	}
	for _, e := range p.transient {
		if !droppableKinds[e.Kind] {
			return nil
		}
	}
	out := p.transient
	p.transient = nil
	slices.SortStableFunc(out, func(a, b *TransientError) int {
		return cmpKey(a.Kind, a.Namespace, a.Name, a.Field, a.Rule, b.Kind, b.Namespace, b.Name, b.Field, b.Rule)
	})
	return out
}

func (p *problems) warn(o objRef, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	p.warnings = append(p.warnings, o.String()+": "+msg)
}

// err returns all collected errors, sorted (kind, namespace, name, field,
// rule) so that the text is stable across calls, joined with errors.Join.
// Validation errors come first.
func (p *problems) err() error {
	if len(p.invalid) == 0 && len(p.transient) == 0 {
		return nil
	}
	slices.SortStableFunc(p.invalid, func(a, b *ValidationError) int {
		return cmpKey(a.Kind, a.Namespace, a.Name, a.Field, a.Rule, b.Kind, b.Namespace, b.Name, b.Field, b.Rule)
	})
	slices.SortStableFunc(p.transient, func(a, b *TransientError) int {
		return cmpKey(a.Kind, a.Namespace, a.Name, a.Field, a.Rule, b.Kind, b.Namespace, b.Name, b.Field, b.Rule)
	})
	errs := make([]error, 0, len(p.invalid)+len(p.transient))
	var last string
	for _, e := range p.invalid {
		if s := e.Error(); s != last { // the same conflict can be found twice
			errs = append(errs, e)
			last = s
		}
	}
	for _, e := range p.transient {
		if s := e.Error(); s != last {
			errs = append(errs, e)
			last = s
		}
	}
	return errors.Join(errs...)
}

func cmpKey(ak, ans, an, af, ar, bk, bns, bn, bf, br string) int {
	return cmp.Or(cmp.Compare(ak, bk), cmp.Compare(ans, bns), cmp.Compare(an, bn), cmp.Compare(af, bf), cmp.Compare(ar, br))
}
