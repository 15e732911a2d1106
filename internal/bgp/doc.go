// Package bgp holds Herald's BGP model: the peer and path types the speaker
// core works with, the Speaker interface a BGP implementation provides, and
// the pure rules that turn many announcement reasons into one desired state
// (MergePaths) and a desired state into minimal changes (DiffPeers,
// DiffPaths).
//
// The package imports no BGP library and opens no sockets. The only
// implementation of Speaker lives in internal/bgp/gobgp, which embeds a
// gobgp server; everything gobgp-specific stays there.
//
// Relevant standards: RFC 4271 (BGP-4), RFC 4760 (MP-BGP), RFC 1997
// (communities), RFC 8092 (large communities), RFC 4724 (graceful restart),
// RFC 2385 (TCP-MD5).
package bgp
