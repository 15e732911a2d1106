package eventrec

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/internal/testenv"
)

// BenchmarkWrite measures the recorder's client side of one event about a
// new Service (an IPAllocated event, each about another Service, as after
// a burst): building, correlating and writing it to a real API server and
// decoding the answer. Per op: one event written (B/op and allocs/op of
// this process, which holds no API server; "cpu-ns/op" its CPU time, which
// unlike ns/op holds on a busy machine; "server-cpu-ns/op" that of the
// test's API server and etcd, its child processes). The timer stops once Stop has
// written every queued event. Sub-benchmarks: "protobuf", the recorder as
// New makes it, and "json", with its client speaking JSON as client-go's
// default (what the recorder did before), for a comparison in one run.
func BenchmarkWrite(b *testing.B) {
	env := testenv.Start(b)
	for _, enc := range []string{"json", "protobuf"} {
		b.Run(enc, func(b *testing.B) {
			ns := env.Namespace(b)
			ctx := context.Background()
			rec, err := New(env.Config, env.Scheme, Options{Component: Controller, Registerer: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			if enc == "json" {
				cs, err := typedcorev1.NewForConfig(rest.CopyConfig(env.Config))
				if err != nil {
					b.Fatal(err)
				}
				rec.events = cs.Events("")
			}
			refs := make([]*corev1.ObjectReference, b.N)
			for i := range refs {
				refs[i] = serviceRef(ns, i)
			}
			ips := []string{"2001:db8:1::1"}

			b.ReportAllocs()
			b.ResetTimer()
			cpu0, srv0 := processCPU(b), childrenCPU(b)
			for i := range b.N {
				if err := rec.EventfWait(ctx, refs[i], corev1.EventTypeNormal, "IPAllocated", "Assigned IP %q", ips); err != nil {
					b.Fatal(err)
				}
			}
			rec.Stop(ctx)
			cpu, srv := processCPU(b)-cpu0, childrenCPU(b)-srv0
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(srv.Nanoseconds())/float64(b.N), "server-cpu-ns/op")
			for _, reason := range dropReasons {
				if n := dropped(rec, reason); n != 0 {
					b.Fatalf("herald_events_dropped_total{reason=%q} = %v", reason, n)
				}
			}
			var evs corev1.EventList
			if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
			if len(evs.Items) != b.N {
				b.Fatalf("%d Events stored, want %d", len(evs.Items), b.N)
			}
		})
	}
}

// processCPU is the user and system CPU time the process has used so far
// (getrusage RUSAGE_SELF: every thread, the garbage collector's included).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPU is the user and system CPU time the process's running child
// processes (the test's kube-apiserver and etcd) have used so far, from
// /proc/<pid>/stat (fields 14 and 15, clock ticks of 10 ms).
func childrenCPU(b *testing.B) time.Duration {
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, t := range tasks {
		kids, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		for _, pid := range strings.Fields(string(kids)) {
			st, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			s := string(st)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
			if len(f) < 13 {
				b.Fatalf("short /proc/%s/stat", pid)
			}
			u, _ := strconv.ParseInt(f[11], 10, 64)
			sy, _ := strconv.ParseInt(f[12], 10, 64)
			total += time.Duration(u+sy) * 10 * time.Millisecond
		}
	}
	return total
}
