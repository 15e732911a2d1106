package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPPeerSpec is the older metallb.io/v1beta1 shape of a BGP peer: peerASN
// and peerAddress are required, nodeSelectors use NodeSelector, and there
// is no password Secret, dynamicASN, VRF, graceful restart or connectTime.
// See api/v1beta2 for the field semantics.
type BGPPeerSpec struct {
	// MyASN is the local autonomous system number, 1..4294967295.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	MyASN uint32 `json:"myASN"`

	// PeerASN is the remote autonomous system number, 1..4294967295.
	// +kubebuilder:validation:Maximum=4294967295
	// +kubebuilder:validation:Format=int64
	PeerASN uint32 `json:"peerASN"`

	// PeerAddress is the IPv4 or IPv6 address of the router.
	PeerAddress string `json:"peerAddress"`

	// SourceAddress is the local IP address the session is opened from.
	// +optional
	SourceAddress string `json:"sourceAddress,omitempty"`

	// PeerPort is the router's TCP port, 1..16384, default 179.
	// +optional
	// +kubebuilder:default:=179
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16384
	PeerPort uint16 `json:"peerPort,omitempty"`

	// HoldTime is the proposed BGP hold time (RFC 4271 §4.2), 3s to 65535s
	// (Herald refuses 0).
	// +optional
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`

	// KeepaliveTime is the interval between KEEPALIVE messages.
	// +optional
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`

	// RouterID is the BGP identifier sent in OPEN, written as an IPv4
	// address.
	// +optional
	RouterID string `json:"routerID,omitempty"`

	// NodeSelectors limits the nodes that open this session. Empty means
	// all nodes.
	// +optional
	NodeSelectors []NodeSelector `json:"nodeSelectors,omitempty"`

	// Password is the TCP MD5 signature key of the session (RFC 2385).
	// +optional
	Password string `json:"password,omitempty"`

	// BFDProfile is the name of a BFDProfile enabling BFD (RFC 5880) on the
	// session, run by Herald's speaker (see the v1beta2 field).
	// +optional
	BFDProfile string `json:"bfdProfile,omitempty"`

	// EBGPMultiHop allows an eBGP peer more than one hop away.
	// +optional
	EBGPMultiHop bool `json:"ebgpMultiHop,omitempty"`
}

// NodeSelector is the v1beta1 node selector; its JSON shape equals
// metav1.LabelSelector's.
type NodeSelector struct {
	// MatchLabels selects nodes carrying all these labels.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`

	// MatchExpressions selects nodes matching all these expressions.
	// +optional
	MatchExpressions []MatchExpression `json:"matchExpressions,omitempty"`
}

// MatchExpression is a label selector requirement of a v1beta1 NodeSelector.
type MatchExpression struct {
	// Key is the label key.
	Key string `json:"key"`

	// Operator is In, NotIn, Exists or DoesNotExist.
	Operator string `json:"operator"`

	// Values are the label values for In and NotIn.
	// +optional
	Values []string `json:"values,omitempty"`
}

// BGPPeerStatus is empty.
type BGPPeerStatus struct{}

// BGPPeer is the older metallb.io/v1beta1 shape of a BGP router that speakers
// peer with. Herald serves it, as MetalLB does, through the controller's
// conversion webhook (/convert, see ConvertTo and ConvertFrom); objects are
// stored as metallb.io/v1beta2, the version Herald's components read.
//
// +kubebuilder:object:root=true
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

// BGPPeerList is a list of BGPPeer.
//
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BGPPeer objects.
	Items []BGPPeer `json:"items"`
}
