// Package allocationtest starts a real kube-apiserver and etcd (through
// controller-runtime's envtest) with Herald's CRDs and a dual-stack Service
// CIDR large enough for thousands of Services, for the allocation integration
// tests and the bench-alloc measurement command. internal/testenv is the
// general starter; this one exists because those two need API server flags
// (dual-stack, a /16 Service range) and must also run outside `go test`.
package allocationtest

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/testenv"
)

// ServiceCIDRs is the API server's --service-cluster-ip-range: IPv4 /16 and
// IPv6 /112, so Services can be dual-stack and a burst of 10k fits.
const ServiceCIDRs = "10.96.0.0/16,fd00:10:96::/112"

// Server is a running API server with Herald's CRDs.
type Server struct {
	Config     *rest.Config
	Client     client.Client
	Scheme     *runtime.Scheme
	KubeConfig []byte
	env        *envtest.Environment
}

// Start starts etcd and kube-apiserver from KUBEBUILDER_ASSETS (else
// bin/k8s of the repository) and installs manifests/crds. Stop it with Stop.
func Start() (*Server, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("%s missing in %s (KUBEBUILDER_ASSETS): run make test-assets", bin, assets)
		}
	}
	scheme, err := testenv.NewScheme()
	if err != nil {
		return nil, err
	}
	crds, err := readCRDs(filepath.Join(root, "manifests", "crds"))
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		Scheme:                   scheme,
		CRDInstallOptions:        envtest.CRDInstallOptions{CRDs: crds},
		ControlPlaneStartTimeout: 3 * time.Minute,
	}
	api := env.ControlPlane.GetAPIServer()
	api.Configure().Set("service-cluster-ip-range", ServiceCIDRs)
	// Bursts of thousands of writes: do not let the API server's own
	// flow control be the bottleneck being measured.
	api.Configure().Set("max-requests-inflight", "2000")
	api.Configure().Set("max-mutating-requests-inflight", "1000")
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start API server from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Server{Config: cfg, Client: c, Scheme: scheme, KubeConfig: env.KubeConfig, env: env}, nil
}

// Stop stops the API server and etcd.
func (s *Server) Stop() error { return s.env.Stop() }

// readCRDs reads the CRDs of dir (manifests/crds) as they are installed.
func readCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "metallb.io_*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("no CRDs in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, crd)
	}
	return out, nil
}
