package v1beta2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DynamicASNMode says which remote ASNs a peer configured without peerASN
// accepts.
// +kubebuilder:validation:Enum=internal;external
type DynamicASNMode string

// Values of BGPPeerSpec.DynamicASN.
const (
	// InternalASNMode accepts a remote ASN equal to myASN (iBGP).
	InternalASNMode DynamicASNMode = "internal"
	// ExternalASNMode accepts any remote ASN other than myASN (eBGP).
	ExternalASNMode DynamicASNMode = "external"
)

// BGPPeerSpec describes a BGP-4 session (RFC 4271) that speakers open to a
// router.
//
// The API server checks ranges, enums and the CEL rules below; the rules
// that involve several fields or objects (exactly one of peerASN and
// dynamicASN, exactly one of peerAddress and interface, password vs
// passwordSecret, timers, parseable IPs) are checked by Herald's
// configuration validation, which rejects the whole configuration with an
// error naming the peer and field.
//
// +kubebuilder:validation:XValidation:rule="(has(self.enableGracefulRestart) && self.enableGracefulRestart) == (has(oldSelf.enableGracefulRestart) && oldSelf.enableGracefulRestart)",message="enableGracefulRestart cannot be changed after creation"
type BGPPeerSpec struct {
	// MyASN is the local autonomous system number, 1..4294967295 (4-octet
	// ASNs, RFC 6793).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	MyASN uint32 `json:"myASN"`

	// PeerASN is the remote autonomous system number, 1..4294967295.
	// Exactly one of peerASN and dynamicASN must be set. A peer with
	// peerASN == myASN is iBGP, otherwise eBGP.
	// +optional
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	PeerASN uint32 `json:"peerASN,omitempty"`

	// DynamicASN accepts any remote ASN equal to myASN ("internal") or
	// different from it ("external") instead of a fixed peerASN, as sent in
	// the router's OPEN message. Refused by Herald (webhook and
	// ConfigurationState): its gobgp backend would accept any ASN without
	// checking the class; set peerASN.
	// +optional
	DynamicASN DynamicASNMode `json:"dynamicASN,omitempty"`

	// LocalASN is the ASN presented to the peer instead of myASN
	// (the router sees the session coming from localASN), 1..4294967295.
	// +optional
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	LocalASN uint32 `json:"localASN,omitempty"`

	// PeerAddress is the IPv4 or IPv6 address of the router. Exactly one of
	// peerAddress and interface must be set. Herald refuses an address with
	// a zone (fe80::1%eth1) and, on one node, the same address in two VRFs
	// (gobgp keys its sessions by address alone).
	// +optional
	PeerAddress string `json:"peerAddress,omitempty"`

	// Interface is a node interface to run unnumbered BGP over (the peer is
	// found through IPv6 link-local neighbor discovery, RFC 4861). Refused
	// by Herald: its gobgp backend announced with next hop :: on such a
	// session and the router accepted no path; set peerAddress.
	// +optional
	Interface string `json:"interface,omitempty"`

	// SourceAddress is the local IP address the session is opened from. It
	// must be assigned to an interface of the node, otherwise the connection
	// fails. Empty lets the kernel choose.
	// +optional
	SourceAddress string `json:"sourceAddress,omitempty"`

	// PeerPort is the router's TCP port, 1..16384, default 179.
	// +optional
	// +kubebuilder:default:=179
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16384
	PeerPort uint16 `json:"peerPort,omitempty"`

	// HoldTime is the proposed BGP hold time (RFC 4271 §4.2), e.g. "90s". It
	// is truncated to whole seconds and must then be 3s to 65535s: 0 (no
	// keepalives, which RFC 4271 allows) is refused by Herald, whose gobgp
	// backend would send 90s instead. When only holdTime is set, the
	// keepalive interval is a third of it. Default 90s.
	// +optional
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`

	// KeepaliveTime is the interval between KEEPALIVE messages; it must not
	// exceed holdTime. When only keepaliveTime is set, holdTime is three
	// times it (so 0 alone is refused, as holdTime 0 is).
	// +optional
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`

	// ConnectTime is the delay between attempts to open the TCP connection,
	// whole seconds from 1s to 65535s. Unset uses the BGP backend's default.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('65535s')",message="connectTime must be between 1s and 65535s"
	// +kubebuilder:validation:XValidation:rule="duration(self).getMilliseconds() % 1000 == 0",message="connectTime must be a whole number of seconds"
	ConnectTime *metav1.Duration `json:"connectTime,omitempty"`

	// RouterID is the BGP identifier sent in OPEN, written as an IPv4
	// address. Empty uses an IPv4 address of the node.
	// +optional
	RouterID string `json:"routerID,omitempty"`

	// NodeSelectors limits the nodes that open this session to those
	// matching at least one selector. Empty means all nodes. Duplicate
	// selectors are rejected.
	// +optional
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Password is the TCP MD5 signature key of the session (RFC 2385).
	// Mutually exclusive with passwordSecret.
	// +optional
	Password string `json:"password,omitempty"`

	// PasswordSecret refers to a Secret of type kubernetes.io/basic-auth in
	// Herald's namespace whose "password" key holds the TCP MD5 key.
	// Mutually exclusive with password. A missing Secret is a transient
	// error: the peer is configured once it appears.
	// +optional
	PasswordSecret *corev1.SecretReference `json:"passwordSecret,omitempty"`

	// BFDProfile is the name of a BFDProfile enabling BFD (RFC 5880) on the
	// session, run by Herald's speaker: single hop (RFC 5881), or multihop
	// (RFC 5883) with ebgpMultiHop and sourceAddress. BFD down resets the
	// BGP session. Refused on vrf and interface peers and with ebgpMultiHop
	// but no sourceAddress; a profile that does not exist (yet) leaves the
	// peer out until it does.
	// +optional
	BFDProfile string `json:"bfdProfile,omitempty"`

	// EnableGracefulRestart enables BGP graceful restart (RFC 4724) on the
	// session. It cannot be changed after creation (the API server rejects
	// the update).
	// +optional
	EnableGracefulRestart bool `json:"enableGracefulRestart,omitempty"`

	// EBGPMultiHop allows an eBGP peer that is more than one hop away. It is
	// rejected when peerASN == myASN (iBGP).
	// +optional
	EBGPMultiHop bool `json:"ebgpMultiHop,omitempty"`

	// VRF is the host VRF the session is opened from: Herald binds the
	// session's socket to the VRF device of that name (SO_BINDTODEVICE).
	// Empty is the default VRF. On a node without the device the session
	// never comes up (its BGPSessionState's lastError says "no such
	// device").
	// +optional
	VRF string `json:"vrf,omitempty"`

	// DisableMP is deprecated and ignored: Herald always negotiates
	// multiprotocol BGP (RFC 4760) and warns when this is set.
	// +optional
	DisableMP bool `json:"disableMP,omitempty"`

	// DualStackAddressFamily also negotiates the other address family on the
	// session (RFC 4760). Default false. Herald announces only the session's
	// own family on it (with a warning): its gobgp backend's next hop for
	// the other family is unusable; add a BGPPeer of the other family.
	// +optional
	DualStackAddressFamily bool `json:"dualStackAddressFamily,omitempty"`
}

// BGPPeerStatus is empty; it exists so MetalLB objects carrying a status
// apply unchanged.
type BGPPeerStatus struct{}

// BGPPeer is a BGP router that speakers peer with. This is the storage
// version and the conversion hub of BGPPeer.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.peerAddress`
// +kubebuilder:printcolumn:name="ASN",type=string,JSONPath=`.spec.peerASN`
// +kubebuilder:printcolumn:name="BFD Profile",type=string,JSONPath=`.spec.bfdProfile`
// +kubebuilder:printcolumn:name="Multi Hops",type=string,JSONPath=`.spec.ebgpMultiHop`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the BGPPeer.
	Spec BGPPeerSpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see BGPPeerStatus).
	Status BGPPeerStatus `json:"status,omitempty"`
}

// Hub marks v1beta2 as the version BGPPeer is converted through
// (sigs.k8s.io/controller-runtime/pkg/conversion.Hub).
func (*BGPPeer) Hub() {}

// BGPPeerList is a list of BGPPeer.
//
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BGPPeer objects.
	Items []BGPPeer `json:"items"`
}
