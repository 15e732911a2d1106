package gobgp

import (
	"net"

	"golang.org/x/sys/unix"
)

// listenerMD5Supported probes whether TCP_MD5SIG (RFC 2385) can be set on a
// listening loopback socket, which the router side of TestMD5 needs.
func listenerMD5Supported() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		return err
	}
	sig := unix.TCPMD5Sig{Keylen: 4}
	sig.Addr.Family = unix.AF_INET
	copy(sig.Addr.Data[2:6], []byte{127, 0, 0, 1})
	copy(sig.Key[:], "test")
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig) }); err != nil {
		return err
	}
	return serr
}
