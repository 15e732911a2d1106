package serving

import (
	"flag"
	"strconv"
)

// ServiceAccountNamespaceFile holds the Pod's namespace; both binaries
// default --namespace to it.
const ServiceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// EnvString defines a string flag whose default is the environment
// variable env when it is set (getenv is os.Getenv outside tests), so an
// explicit flag still wins. The usage names the variable. MetalLB's
// binaries read their METALLB_* variables this way.
func EnvString(fs *flag.FlagSet, getenv func(string) string, p *string, name, env, def, usage string) {
	if v := getenv(env); v != "" {
		def = v
	}
	fs.StringVar(p, name, def, usage+" (env "+env+")")
}

// EnvInt is EnvString for an int flag; a value of env that is not an
// integer is ignored (def stays).
func EnvInt(fs *flag.FlagSet, getenv func(string) string, p *int, name, env string, def int, usage string) {
	if v, err := strconv.Atoi(getenv(env)); err == nil {
		def = v
	}
	fs.IntVar(p, name, def, usage+" (env "+env+")")
}
