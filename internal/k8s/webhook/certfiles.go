package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Names of the serving certificate and key in the Secret and in CertDir
// (kubernetes.io/tls conventions, as the rotator and cert-manager write them).
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
)

// certFiles copies tls.crt and tls.key from the certificate Secret into dir
// whenever they change, for runs where the Secret is not mounted. The webhook
// server's certificate watcher picks the new files up.
type certFiles struct {
	reader client.Reader
	secret types.NamespacedName
	dir    string
	every  time.Duration
	// written is closed after the first successful write.
	written chan struct{}
	log     *slog.Logger
}

func (c *certFiles) NeedLeaderElection() bool { return false }

// Start polls the Secret until ctx ends: every second until the files exist,
// then every c.every. Read and write errors are logged and retried.
func (c *certFiles) Start(ctx context.Context) error {
	var cert, key []byte
	for {
		s := &corev1.Secret{}
		err := c.reader.Get(ctx, c.secret, s)
		switch {
		case err != nil:
			c.log.Debug("read webhook certificate Secret", "secret", c.secret, "error", err)
		case len(s.Data[certFile]) == 0 || len(s.Data[keyFile]) == 0:
			// Not written yet by the rotator.
		case !bytes.Equal(s.Data[certFile], cert) || !bytes.Equal(s.Data[keyFile], key):
			if err := writeCertFiles(c.dir, s.Data[certFile], s.Data[keyFile]); err != nil {
				c.log.Error("write webhook certificate files", "dir", c.dir, "error", err)
				break
			}
			if cert == nil {
				close(c.written)
			}
			cert, key = s.Data[certFile], s.Data[keyFile]
			c.log.Info("webhook certificate files written", "dir", c.dir, "secret", c.secret)
		}
		wait := time.Second
		if cert != nil {
			wait = c.every
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// writeCertFiles replaces dir/tls.key and dir/tls.crt atomically (write to
// a temporary file, then rename), key first so that a reader that sees the
// new certificate also finds its key.
func writeCertFiles(dir string, cert, key []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{keyFile, key}, {certFile, cert}} {
		tmp, err := os.CreateTemp(dir, "."+f.name+"-*")
		if err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
		_, werr := tmp.Write(f.data)
		cerr := tmp.Close()
		if werr != nil || cerr != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", f.name, errors.Join(werr, cerr))
		}
		if err := os.Rename(tmp.Name(), filepath.Join(dir, f.name)); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return nil
}
