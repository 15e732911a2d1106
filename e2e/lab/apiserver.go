package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/herald-lb/herald/internal/poll"
)

// Kubeconfig file names in StateDir.
const (
	// LabKubeconfigFile reaches the API server at 198.51.100.254:6443, from
	// inside any lab namespace (what Herald's processes use).
	LabKubeconfigFile = "kubeconfig-lab"
	// HostKubeconfigFile reaches it through the loopback proxy from the root
	// namespace; written only when Config.LoopbackProxy is set.
	HostKubeconfigFile = "kubeconfig"
)

// ControlNamespace returns the namespace running etcd and kube-apiserver.
func (l *Lab) ControlNamespace() string { return nsName(l.cfg.Prefix, "ctl") }

// APIServerURL is the API server's address inside the lab.
func APIServerURL() string {
	return "https://" + net.JoinHostPort(APIServerAddr.String(), strconv.Itoa(APIServerPort))
}

func (l *Lab) assetsDir() (string, error) {
	d := l.cfg.AssetsDir
	if d == "" {
		d = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if d == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		d = filepath.Join(root, "bin", "k8s")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(d, b)); err != nil {
			return "", fmt.Errorf("%s not found in %s (run `make test-assets`): %w", b, d, err)
		}
	}
	return d, nil
}

// startAPIServer starts etcd (on the control namespace's own loopback) and
// kube-apiserver (on 198.51.100.254:6443), and writes the kubeconfigs.
// The flags are a minimal secure control plane: TLS serving, RBAC, token
// and service-account authentication, no kube-proxy.
func (l *Lab) startAPIServer(ctx context.Context, assets string) error {
	ns := l.ControlNamespace()
	sd := l.cfg.StateDir
	pk := filepath.Join(sd, pkiDir)
	etcdDir := filepath.Join(sd, "etcd")
	if err := os.RemoveAll(etcdDir); err != nil {
		return err
	}
	if _, err := l.Start(ns, "etcd", []string{filepath.Join(assets, "etcd"),
		"--name=lab", "--data-dir=" + etcdDir,
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=lab=http://127.0.0.1:2380",
		"--unsafe-no-fsync", "--log-level=warn"}, nil); err != nil {
		return err
	}
	if _, err := l.Start(ns, "kube-apiserver", []string{filepath.Join(assets, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=" + APIServerAddr.String(), "--advertise-address=" + APIServerAddr.String(),
		"--secure-port=" + strconv.Itoa(APIServerPort),
		"--tls-cert-file=" + filepath.Join(pk, srvCertFile), "--tls-private-key-file=" + filepath.Join(pk, srvKeyFile),
		"--cert-dir=" + filepath.Join(sd, "apiserver-certs"),
		"--endpoint-reconciler-type=none",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(pk, saPubFile),
		"--service-account-signing-key-file=" + filepath.Join(pk, saKeyFile),
		"--token-auth-file=" + filepath.Join(pk, tokensFile),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=" + ServiceClusterIPRanges,
		"--allow-privileged=true",
		// No kube-proxy routes ClusterIPs: the API server calls webhooks
		// (and aggregated APIs) at an endpoint of the Service instead.
		"--enable-aggregator-routing=true",
		"--profiling=false",
	}, nil); err != nil {
		return err
	}
	if err := l.writeKubeconfig(filepath.Join(sd, LabKubeconfigFile), APIServerURL()); err != nil {
		return err
	}
	return l.waitAPIServer(ctx)
}

// waitAPIServer polls /readyz through the control namespace.
func (l *Lab) waitAPIServer(ctx context.Context) error {
	hc, err := rest.HTTPClientFor(l.RESTConfig())
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	hc.Timeout = 2 * time.Second
	_, err = poll.Wait(ctx, 90*time.Second, "", func() error {
		for _, n := range []string{"etcd", "kube-apiserver"} {
			if p := l.Process(n); p != nil && p.Done() != nil {
				select {
				case <-p.Done():
					return poll.Stop(fmt.Errorf("%s exited (%v), see %s", n, p.Err(), p.Log))
				default:
				}
			}
		}
		resp, err := hc.Get(APIServerURL() + "/readyz")
		if err != nil {
			return fmt.Errorf("api server not ready: %w", err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("api server not ready: %s: %s", resp.Status, body)
		}
		return nil
	}, labEvery)
	return err
}

func (l *Lab) writeKubeconfig(path, server string) error {
	return writeKubeconfig(path, server, l.pki.caPEM, l.pki.adminToken, "admin")
}

// writeKubeconfig writes a kubeconfig for server with a bearer token.
func writeKubeconfig(path, server string, ca []byte, token, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["herald-lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["herald-lab"] = &clientcmdapi.Context{Cluster: "herald-lab", AuthInfo: user}
	cfg.CurrentContext = "herald-lab"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	// Atomically (a temporary file renamed over path): pods of one service
	// account share the file, and StartPod rewrites it for each while the
	// ones started before read it (clientcmd.WriteToFile truncates first,
	// so a reader could load an empty config).
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o600)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// RESTConfig returns an admin client-go config for the lab's API server
// that works from the root namespace: its connections are made inside the
// control namespace. Each call returns a new copy.
func (l *Lab) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            APIServerURL(),
		BearerToken:     l.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: l.pki.caPEM},
		Dial:            l.DialContext(l.ControlNamespace()),
		QPS:             200,
		Burst:           400,
	}
}

// Client returns an admin clientset (see [Lab.RESTConfig]).
func (l *Lab) Client() kubernetes.Interface {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client == nil {
		l.client = kubernetes.NewForConfigOrDie(l.RESTConfig())
	}
	return l.client
}

// LabKubeconfig returns the path of the admin kubeconfig for use inside the
// lab namespaces (server https://198.51.100.254:6443).
func (l *Lab) LabKubeconfig() string { return filepath.Join(l.cfg.StateDir, LabKubeconfigFile) }

// HostKubeconfig returns the path of the admin kubeconfig for the root
// namespace (through the loopback proxy), or "" when no proxy runs.
func (l *Lab) HostKubeconfig() string {
	if l.st.ProxyPort == 0 {
		return ""
	}
	return filepath.Join(l.cfg.StateDir, HostKubeconfigFile)
}

// Kubectl runs kubectl (KubectlPath) with the lab kubeconfig inside the
// control namespace and returns its combined output.
func (l *Lab) Kubectl(ctx context.Context, args ...string) (string, error) {
	k, err := KubectlPath()
	if err != nil {
		return "", err
	}
	return run(ctx, l.ControlNamespace(), append([]string{k, "--kubeconfig", l.LabKubeconfig()}, args...)...)
}

// moduleRoot finds the directory of Herald's go.mod above the working directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && len(b) > 0 && containsModule(b, "github.com/herald-lb/herald") {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("herald module root not found above the working directory")
		}
		d = parent
	}
}

func containsModule(gomod []byte, mod string) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if strings.TrimSpace(line) == "module "+mod {
			return true
		}
	}
	return false
}

// ServiceAccountKubeconfig writes StateDir/kubeconfig-<namespace>-<name>
// for ServiceAccount namespace/name, with a token from the TokenRequest API
// valid for 24 hours, for use inside the lab (server 198.51.100.254:6443),
// and returns its path. Lab processes that play Pods (Herald's controller and
// speakers) use it, so RBAC applies to them as on a cluster. The
// ServiceAccount must exist.
func (l *Lab) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	tr, err := l.Client().CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	path := filepath.Join(l.cfg.StateDir, "kubeconfig-"+namespace+"-"+name)
	if err := writeKubeconfig(path, APIServerURL(), l.pki.caPEM, tr.Status.Token, "system:serviceaccount:"+namespace+":"+name); err != nil {
		return "", err
	}
	return path, nil
}

// ModuleRoot returns the directory of Herald's go.mod above the working
// directory.
func ModuleRoot() (string, error) { return moduleRoot() }
