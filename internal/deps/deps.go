//go:build tools

// Package deps is scaffolding while the project is being laid out in
// parallel: it pins the libraries every package will use so that go mod tidy
// keeps them. It is removed once real imports hold them.
package deps

import (
	_ "github.com/go-logr/logr"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/mdlayher/arp"
	_ "github.com/mdlayher/ethernet"
	_ "github.com/mdlayher/ndp"
	_ "github.com/osrg/gobgp/v3/api"
	_ "github.com/osrg/gobgp/v3/pkg/apiutil"
	_ "github.com/osrg/gobgp/v3/pkg/log"
	_ "github.com/osrg/gobgp/v3/pkg/packet/bgp"
	_ "github.com/osrg/gobgp/v3/pkg/server"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "google.golang.org/protobuf/types/known/anypb"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/api/discovery/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	_ "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/apimachinery/pkg/labels"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/record"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	_ "sigs.k8s.io/controller-runtime/pkg/webhook/conversion"
	_ "sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	_ "sigs.k8s.io/yaml"
	_ "golang.org/x/sync/errgroup"
	_ "github.com/vishvananda/netlink"
)
