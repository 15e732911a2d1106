package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/bgp"
	"github.com/herald-lb/herald/internal/k8s/serving"
	"github.com/herald-lb/herald/internal/members"
)

// options are the speaker's command line, after environment fallbacks.
type options struct {
	nodeName, podName, namespace string
	mlBindAddr                   string
	mlBindPort                   int
	mlLabels                     string
	mlSecretKeyPath              string
	mlTimings                    *members.TimingFlags
	mlKeyDerivation              string
	l2Election                   string
	lbClass                      string
	ignoreExcludeLB              bool
	enableL2, enableBGP          bool
	bgpMaxReceivedPrefixes       uint
	gratuitousCount              int
	gratuitousInterval           time.Duration
	l2HandoverTimeout            time.Duration
	excludeL2Config              string
	logLevel                     string
	// pprof is --pprof: serve net/http/pprof under /debug/pprof/ on the
	// metrics port.
	pprof   bool
	serving serving.Flags
	// version is --version: print internal/version.Line and exit 0.
	version bool
}

// memberlistEnabled is MetalLB's rule: both --ml-bindaddr and --ml-labels.
// L2 election modes (--l2-election).
const (
	// l2ElectionPerAddress elects each address on its own (metallb#968).
	l2ElectionPerAddress = "per-address"
	// l2ElectionMetalLB elects every address of a Service on its first
	// address, as MetalLB's speakers do: for a group that mixes MetalLB and
	// Herald speakers (the migration window).
	l2ElectionMetalLB = "metallb"
	// l2ElectionBalanced elects every layer 2 address at once with bounded
	// loads (announce.ElectBalancedServices): no node above
	// max(⌈m/n⌉+1, ⌊1.25·m/n⌋) of m addresses on n equal nodes.
	l2ElectionBalanced = "balanced"
)

// balancedL2 reports --l2-election=balanced (speaker.Options.BalancedL2).
func (o *options) balancedL2() bool { return o.l2Election == l2ElectionBalanced }

// announceOptions are the speaker-wide decision settings. MetalLB's layer 2
// election (per Service, on its first address) is on with
// --l2-election=metallb, and with --ml-key-derivation=metallb, which only a
// group mixed with MetalLB speakers (v0.15 and older) needs.
func (o *options) announceOptions() announce.Options {
	return announce.Options{IgnoreExcludeLB: o.ignoreExcludeLB, LoadBalancerClass: o.lbClass,
		ElectByServiceFirstIP: o.l2Election == l2ElectionMetalLB || members.KeyDerivation(o.mlKeyDerivation) == members.KeyDerivationMetalLB}
}

func (o *options) memberlistEnabled() bool { return o.mlBindAddr != "" && o.mlLabels != "" }

// register defines the flags on fs. Flags with a METALLB_* variable take
// it as their default, so an explicit flag wins over the environment.
func (o *options) register(fs *flag.FlagSet, getenv func(string) string) {
	str := func(p *string, name, env, usage string) {
		serving.EnvString(fs, getenv, p, name, env, "", usage)
	}
	fs.BoolVar(&o.version, "version", false, "Print the version, commit and Go version, then exit.")
	str(&o.nodeName, "node-name", "METALLB_NODE_NAME", "Name of this node (spec.nodeName). Required.")
	str(&o.podName, "pod-name", "METALLB_POD_NAME", "Name of the speaker Pod, owner of the objects it writes.")
	str(&o.namespace, "namespace", "METALLB_NAMESPACE", "Herald's namespace (default: the service account's).")
	str(&o.mlBindAddr, "ml-bindaddr", "METALLB_ML_BIND_ADDR", "Memberlist bind address (the Pod IP); memberlist runs only with --ml-labels too.")
	serving.EnvInt(fs, getenv, &o.mlBindPort, "ml-bindport", "METALLB_ML_BIND_PORT", members.DefaultBindPort, "Memberlist TCP and UDP port")
	str(&o.mlLabels, "ml-labels", "METALLB_ML_LABELS", "Label selector of the speaker Pods, for memberlist discovery.")
	str(&o.mlSecretKeyPath, "ml-secret-key-path", "METALLB_ML_SECRET_KEY_PATH", "Directory holding the memberlist key file \"secretkey\".")
	o.mlTimings = members.AddTimingFlags(fs)
	fs.StringVar(&o.mlKeyDerivation, "ml-key-derivation", string(members.KeyDerivationHerald),
		"Memberlist gossip key from the secret: herald (SHA-256, as MetalLB v0.16 and later) or metallb (the weak derivation of MetalLB v0.15 and older, so such speakers and Herald's form one group; for the migration window only; implies --l2-election=metallb).")
	fs.StringVar(&o.l2Election, "l2-election", l2ElectionPerAddress,
		"Layer 2 election: per-address (each address on its own), balanced (every address at once, no node above max(⌈m/n⌉+1, ⌊1.25·m/n⌋) of m addresses on n equal nodes; set it on every speaker) or metallb (every address of a Service on the node its first address elects, as MetalLB's speakers do; for a group mixed with MetalLB speakers, the migration window only).")
	fs.StringVar(&o.lbClass, "lb-class", "", "loadBalancerClass handled by this speaker (empty: Services without a class).")
	fs.BoolVar(&o.ignoreExcludeLB, "ignore-exclude-lb", false, "Ignore the node.kubernetes.io/exclude-from-external-load-balancers label.")
	fs.BoolVar(&o.enableL2, "enable-l2", true, "Announce in layer 2 (ARP/NDP).")
	fs.BoolVar(&o.enableBGP, "enable-bgp", true, "Announce over BGP.")
	fs.UintVar(&o.bgpMaxReceivedPrefixes, "bgp-max-received-prefixes", bgp.DefaultMaxReceivedPrefixes,
		"Received-prefix limit per BGP session and address family: a session whose peer sends more is closed (Cease, RFC 4486) with a prefixLimitExceeded event on its BGPPeer (0: no limit).")
	fs.IntVar(&o.gratuitousCount, "gratuitous-count", 0, "Gratuitous ARP/NA packets per takeover burst (0: default, <0: none).")
	fs.DurationVar(&o.gratuitousInterval, "gratuitous-interval", 0, "Pause between gratuitous packets of a burst (0: default).")
	fs.DurationVar(&o.l2HandoverTimeout, "l2-handover-timeout", announce.DefaultHandoverTimeout,
		"Longest wait of a layer 2 address this node won for the release of the live speaker that answers it (hand-over, so that two nodes never answer one address). A failed or departed holder is not waited for, nor one whose speaker does not advertise releases in its memberlist metadata (MetalLB's, an older Herald): those are answered at once (0: no hand-over, always answer at once).")
	fs.StringVar(&o.excludeL2Config, "exclude-l2-config", "/etc/metallb/excludel2.yaml", "YAML file with announcedInterfacesToExclude regexes (missing: defaults).")
	fs.StringVar(&o.logLevel, "log-level", "info", "Log level: all, debug, info, warn, error, none.")
	fs.BoolVar(&o.pprof, "pprof", false, "Serve Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics port, behind the same authentication and authorization as /metrics with --metrics-secure (GET on the non-resource URL /debug/pprof/*). For memory and CPU investigations.")
	o.serving.Register(fs, 9120)
	// The speaker runs on the host network: probes stay on loopback.
	o.serving.HealthProbeHost = "127.0.0.1"
}

// complete fills defaults that need the file system and checks the result.
func (o *options) complete(readFile func(string) ([]byte, error)) error {
	var errs []error
	if o.nodeName == "" {
		errs = append(errs, errors.New("--node-name (METALLB_NODE_NAME) is required"))
	}
	if o.namespace == "" {
		b, err := readFile(serving.ServiceAccountNamespaceFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--namespace (METALLB_NAMESPACE) is not set and the service account namespace is unreadable: %w", err))
		} else {
			o.namespace = strings.TrimSpace(string(b))
		}
	}
	switch o.l2Election {
	case l2ElectionPerAddress, l2ElectionMetalLB:
	case l2ElectionBalanced:
		if members.KeyDerivation(o.mlKeyDerivation) == members.KeyDerivationMetalLB {
			errs = append(errs, fmt.Errorf("--l2-election %s: not with --ml-key-derivation=metallb, which implies --l2-election=metallb (a group mixed with MetalLB speakers must elect as they do)", l2ElectionBalanced))
		}
	default:
		errs = append(errs, fmt.Errorf("--l2-election %q: must be %s, %s or %s", o.l2Election, l2ElectionPerAddress, l2ElectionBalanced, l2ElectionMetalLB))
	}
	if o.l2HandoverTimeout < 0 {
		errs = append(errs, fmt.Errorf("--l2-handover-timeout %s: must not be negative (0 disables the hand-over)", o.l2HandoverTimeout))
	}
	if o.mlBindPort < 0 || o.mlBindPort > 65535 {
		errs = append(errs, fmt.Errorf("--ml-bindport %d: must be 0..65535", o.mlBindPort))
	}
	return errors.Join(errs...)
}

// handoverTimeout is speaker.Options.HandoverTimeout for
// --l2-handover-timeout (0 there disables the hand-over, which the option
// spells negative).
func (o *options) handoverTimeout() time.Duration {
	if o.l2HandoverTimeout == 0 {
		return -1
	}
	return o.l2HandoverTimeout
}

// memberlistSecretFile is <--ml-secret-key-path>/secretkey, or "" without
// a path. The memberlist List re-reads it when the kubelet updates the
// mounted Secret and rotates to the new key.
func (o *options) memberlistSecretFile() string {
	if o.mlSecretKeyPath == "" {
		return ""
	}
	return filepath.Join(o.mlSecretKeyPath, "secretkey")
}

// memberlistSecret reads memberlistSecretFile as raw bytes (not decoded,
// not trimmed: members.DeriveKey hashes them as mounted). No path means
// unencrypted gossip.
func (o *options) memberlistSecret(readFile func(string) ([]byte, error)) ([]byte, error) {
	if o.mlSecretKeyPath == "" {
		return nil, nil
	}
	b, err := readFile(o.memberlistSecretFile())
	if err != nil {
		return nil, fmt.Errorf("--ml-secret-key-path: %w", err)
	}
	return b, nil
}

// memberlistPreviousSecret reads <--ml-secret-key-path>/previoussecretkey,
// the key the controller replaced a few minutes ago (internal/k8s/mlsecret,
// PreviousKey), as raw bytes; nil when there is none (the usual case) or no
// path. Read once at start: it matters only to a speaker that starts while
// the others may still use it.
func (o *options) memberlistPreviousSecret(readFile func(string) ([]byte, error)) ([]byte, error) {
	if o.mlSecretKeyPath == "" {
		return nil, nil
	}
	b, err := readFile(filepath.Join(o.mlSecretKeyPath, "previoussecretkey"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--ml-secret-key-path: %w", err)
	}
	return b, nil
}

// excludeL2 reads the layer 2 interface exclusion file. A missing file, or a
// file without announcedInterfacesToExclude, gives nil (the announcer's
// defaults); an empty list excludes nothing.
func excludeL2(path string, readFile func(string) ([]byte, error)) ([]string, error) {
	b, err := readFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--exclude-l2-config: %w", err)
	}
	var f struct {
		AnnouncedInterfacesToExclude *[]string `json:"announcedInterfacesToExclude"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("--exclude-l2-config %s: %w", path, err)
	}
	if f.AnnouncedInterfacesToExclude == nil {
		return nil, nil
	}
	if *f.AnnouncedInterfacesToExclude == nil {
		return []string{}, nil
	}
	return *f.AnnouncedInterfacesToExclude, nil
}
