package serving

import (
	"net/http"
	"net/http/pprof"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// PprofPath is the path prefix AddPprof serves Go's profiles under.
const PprofPath = "/debug/pprof/"

// AddPprof serves net/http/pprof on the metrics server of o (see
// AddHandler: behind /metrics' authentication and authorization when
// metrics are secure): the index and named profiles under PprofPath
// (/debug/pprof/heap, /debug/pprof/goroutine, ...), and the CPU profile,
// trace, symbol and cmdline handlers, whose paths the index does not serve.
func AddPprof(o *metricsserver.Options) {
	AddHandler(o, PprofPath, http.HandlerFunc(pprof.Index))
	AddHandler(o, PprofPath+"cmdline", http.HandlerFunc(pprof.Cmdline))
	AddHandler(o, PprofPath+"profile", http.HandlerFunc(pprof.Profile))
	AddHandler(o, PprofPath+"symbol", http.HandlerFunc(pprof.Symbol))
	AddHandler(o, PprofPath+"trace", http.HandlerFunc(pprof.Trace))
}
