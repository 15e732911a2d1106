//go:build !linux

package gobgp

import "errors"

func listenerMD5Supported() error { return errors.New("TCP-MD5 tests run on Linux only") }
