// Package scheme builds the one runtime.Scheme Herald's binaries, tests and
// lab use: the Kubernetes built-in types (client-go's scheme) and every kind
// of Herald's API, metallb.io v1beta1 and v1beta2.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/api/v1beta2"
)

// New returns a new scheme with the Kubernetes built-in types and
// metallb.io v1beta1 and v1beta2 and herald.io v1alpha1. Its error (a type
// registered twice with different definitions) is a programming error.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, v1beta1.AddToScheme, v1beta2.AddToScheme, v1alpha1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}
