package lab

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// Speakers start 16 at a time, each writing the same service account's
// kubeconfig (StartPod -> ServiceAccountKubeconfig) while started ones read
// it: a reader must never see a truncated file. (A 100-node bench-scale run
// had speakers exit with "kubeconfig: invalid configuration: no
// configuration has been provided".)
func TestWriteKubeconfigConcurrentReadersSeeWholeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeKubeconfig(path, "https://198.51.100.254:6443", []byte("ca"), "token-0", "u"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := writeKubeconfig(path, "https://198.51.100.254:6443", []byte("ca"), fmt.Sprintf("token-%d-%d", w, i), "u"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var bad int
	var first error
	for range 3000 {
		cfg, err := clientcmd.LoadFromFile(path)
		if err == nil && cfg.CurrentContext != "herald-lab" {
			err = fmt.Errorf("no current context in %+v", cfg)
		}
		if err != nil {
			bad++
			if first == nil {
				first = err
			}
		}
	}
	close(stop)
	wg.Wait()
	if bad > 0 {
		t.Errorf("%d of 3000 reads saw an incomplete kubeconfig, first: %v", bad, first)
	}
}
