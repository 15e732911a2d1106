package packaging

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/herald-lb/herald/internal/testenv"
)

// depsPackages are the Debian packages hack/install-deps.sh installs.
var depsPackages = []string{"iproute2", "arping", "ndisc6", "iputils-ping", "curl", "tcpdump", "frr",
	"prometheus", "graphviz", "openssl", "procps", "psmisc", "gcc", "libc6-dev"}

// TestInstallDepsLeavesHostServicesAlone runs hack/install-deps.sh on this
// machine, where every package is installed (as after `make deps`), while
// the host runs its own Prometheus (the Debian /usr/bin/prometheus, on a
// loopback port, with a scratch storage directory). A later run of the
// script must leave that Prometheus alone: before the fix the script
// pkill'ed every /usr/bin/prometheus* process (and stopped the frr and
// prometheus services), and this test failed.
func TestInstallDepsLeavesHostServicesAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hack/install-deps.sh and a Prometheus")
	}
	for _, p := range depsPackages {
		if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", p).Output(); err != nil ||
			!strings.Contains(string(out), "install ok installed") {
			t.Skipf("package %s not installed (run make deps): the script would install packages", p)
		}
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte("global:\n  scrape_interval: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	prom := exec.Command("/usr/bin/prometheus", "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	var logs testenv.SyncBuffer
	prom.Stdout, prom.Stderr = &logs, &logs
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = prom.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = prom.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	ready := func() error {
		select {
		case <-exited:
			return fmt.Errorf("the host's prometheus exited: %v", prom.ProcessState)
		default:
		}
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for err := ready(); err != nil; err = ready() {
		select {
		case <-exited:
			t.Fatalf("prometheus did not start: %v", err)
		case <-ctx.Done():
			t.Fatalf("prometheus not ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	script := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot(t), "hack", "install-deps.sh"))
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("install-deps.sh: %v\n%s", err, out)
	}
	// The script has returned: a signal it sent has been delivered. Prometheus
	// stops serving as soon as it handles SIGTERM; it must still serve, and
	// must not have logged a shutdown.
	if err := ready(); err != nil {
		t.Fatalf("after install-deps.sh: %v", err)
	}
	if strings.Contains(logs.String(), "exiting gracefully") {
		t.Fatal("after install-deps.sh: the host's prometheus received a termination signal")
	}
}

// TestInstallDepsKeepsServicesFromStarting runs hack/install-deps.sh with
// packages missing, on a PATH whose dpkg-query reports them missing and
// whose apt-get, systemctl, service, pkill and killall record their calls
// (the script must not really install anything here). While apt-get runs,
// the policy-rc.d (HERALD_POLICY_RC_D) must forbid every service start (exit
// 101, as invoke-rc.d and deb-systemd-invoke read it); afterwards the
// original policy-rc.d must be back unchanged (or absent, if there was
// none; also when a killed earlier run left its own policy behind), and
// nothing may have been stopped or killed.
func TestInstallDepsKeepsServicesFromStarting(t *testing.T) {
	own := "#!/bin/sh\n# the machine's own policy\nexit 0\n"
	leftover := "#!/bin/sh\n# hack/install-deps.sh: no service starts while it installs packages.\nexit 101\n"
	for _, tc := range []struct {
		name     string
		existing string // "" = no policy-rc.d before
		backup   string // a backup left by a killed run ("" = none)
		want     string // policy-rc.d after ("" = none)
	}{
		{"NoPolicyBefore", "", "", ""},
		{"ExistingPolicyKept", own, "", own},
		// A run killed during apt-get left its policy (and the backup).
		{"LeftoverWithBackup", leftover, own, own},
		{"LeftoverWithoutBackup", leftover, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			record := filepath.Join(dir, "calls")
			policy := filepath.Join(dir, "policy-rc.d")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.existing != "" {
				if err := os.WriteFile(policy, []byte(tc.existing), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.backup != "" {
				if err := os.WriteFile(policy+".herald.abc123", []byte(tc.backup), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			fakes := map[string]string{
				// Every package "frr" is missing; the others are installed.
				"dpkg-query": `for a; do p=$a; done; [ "$p" = frr ] && exit 1; printf 'install ok installed'`,
				// apt-get asks the policy as a maintainer script would.
				"apt-get": `echo "apt-get $*" >>"$REC"
if [ "$1" = install ]; then
  "$HERALD_POLICY_RC_D" frr start; echo "policy frr start: $?" >>"$REC"
  "$HERALD_POLICY_RC_D" prometheus restart; echo "policy prometheus restart: $?" >>"$REC"
fi`,
				"systemctl": `echo "systemctl $*" >>"$REC"`,
				"service":   `echo "service $*" >>"$REC"`,
				"pkill":     `echo "pkill $*" >>"$REC"`,
				"killall":   `echo "killall $*" >>"$REC"`,
			}
			for name, body := range fakes {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", filepath.Join(repoRoot(t), "hack", "install-deps.sh"))
			cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/bin:/bin", "REC="+record, "HERALD_POLICY_RC_D="+policy)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("install-deps.sh: %v\n%s", err, out)
			}
			calls := string(readFile(t, record))
			for _, want := range []string{"apt-get install -y -qq --no-install-recommends frr\n",
				"policy frr start: 101\n", "policy prometheus restart: 101\n"} {
				if !strings.Contains(calls, want) {
					t.Errorf("calls lack %q:\n%s", want, calls)
				}
			}
			for _, bad := range []string{"systemctl", "service", "pkill", "killall"} {
				if strings.Contains(calls, bad+" ") {
					t.Errorf("the script ran %s:\n%s", bad, calls)
				}
			}
			got, err := os.ReadFile(policy)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("policy-rc.d left behind:\n%s", got)
			case tc.want == "" && !os.IsNotExist(err):
				t.Error(err)
			case tc.want != "" && string(got) != tc.want:
				t.Errorf("policy-rc.d not restored: %q (%v), want %q", got, err, tc.want)
			}
			if left, _ := filepath.Glob(policy + ".herald.*"); len(left) > 0 {
				t.Errorf("backup left behind: %v", left)
			}
		})
	}
}
