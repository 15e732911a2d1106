package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels the speaker puts on BGPSessionState objects so they can be listed
// per node and per BGPPeer.
const (
	// LabelNode holds the node name, the same label (metallb.io/node) as on
	// ServiceL2Status and ServiceBGPStatus, so one selector lists every
	// status object of a node.
	LabelNode = "metallb.io/node"
	// LabelBGPPeer holds the BGPPeer's name (set when the name is a valid
	// label value: at most 63 characters).
	LabelBGPPeer = "herald.io/bgppeer"
)

// BFDStatusNotConfigured is BGPSessionStateStatus.BFDStatus for a peer
// without a BFD profile (the value frr-k8s uses).
const BFDStatusNotConfigured = "N/A"

// BGPSessionStateSpec is empty: the object is written by the speaker and
// carries only status.
type BGPSessionStateSpec struct{}

// BGPSessionStateStatus is the state of one BGP session (RFC 4271) from one
// node to one BGPPeer, as that node's speaker sees it. Node, Peer, VRF,
// BGPStatus and BFDStatus have the names and meanings of frr-k8s's
// BGPSessionState (frrk8s.metallb.io/v1beta1), so a query written for one
// reads the other.
type BGPSessionStateStatus struct {
	// Node is the name of the node whose speaker holds the session.
	// +optional
	Node string `json:"node,omitempty"`

	// Peer is the neighbor: its IP address (spec.peerAddress), or the node
	// interface name of an unnumbered session (spec.interface).
	// +optional
	Peer string `json:"peer,omitempty"`

	// BGPPeer is the name of the BGPPeer object (in Herald's namespace)
	// that configures the session.
	// +optional
	BGPPeer string `json:"bgpPeer,omitempty"`

	// VRF is the host VRF the session is bound to (spec.vrf); empty for
	// the default VRF.
	// +optional
	VRF string `json:"vrf,omitempty"`

	// BGPStatus is the session's BGP finite state machine state (RFC 4271
	// §8.2.2): Idle, Connect, Active, OpenSent, OpenConfirm or Established;
	// Unknown before the speaker has seen a state, and Unknown when the
	// controller marks the object because no speaker runs on the node (no
	// Pod, a Pod being deleted, a speaker container not running; LastError
	// then says so and LastTransitionTime is since when).
	// +optional
	BGPStatus string `json:"bgpStatus,omitempty"`

	// BFDStatus is the state of the peer's BFD session (RFC 5880 §4.1):
	// Up, Down, Init or AdminDown; "N/A" when the BGPPeer names no
	// BFDProfile; Unknown when the controller marks the object (see
	// BGPStatus).
	// +optional
	BFDStatus string `json:"bfdStatus,omitempty"`

	// LastTransitionTime is when BGPStatus last changed, as seen by the
	// speaker (a speaker that starts sets it when it first sees the
	// session's state).
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`

	// LastError is the latest reason the session went down or failed to
	// come up: a BGP NOTIFICATION sent or received (RFC 4271 §4.5: error
	// code and subcode, with the RFC 8203 shutdown communication if any),
	// the hold timer expiring, the connection failing, or the BFD session
	// going down. It is kept after the session is Established again, with
	// LastErrorTime, as the last known cause.
	// +optional
	LastError string `json:"lastError,omitempty"`

	// LastErrorTime is when LastError happened.
	// +optional
	LastErrorTime *metav1.Time `json:"lastErrorTime,omitempty"`

	// PrefixesAdvertised is the number of prefixes the speaker currently
	// advertises to the peer (summed over address families).
	// +optional
	PrefixesAdvertised int64 `json:"prefixesAdvertised"`

	// PrefixesReceived is the number of prefixes the peer currently
	// advertises to the speaker (summed over address families; Herald uses
	// none of them).
	// +optional
	PrefixesReceived int64 `json:"prefixesReceived"`
}

// BGPSessionState is the state of one BGP session, one object per node and
// BGPPeer. The speaker of the node writes it in Herald's namespace from its
// session callbacks, labelled LabelNode and LabelBGPPeer, owned by the Node
// (it survives a speaker restart and is garbage-collected with the Node),
// and deletes it when the node no longer has a session to that peer. The
// controller marks the node's objects Unknown as soon as no speaker runs
// on the node, and deletes them once no speaker Pod has existed there for
// --speaker-gone-grace (internal/k8s/sessiongc).
// Writes are coalesced: a flapping session's object shows its latest state,
// written at most about once a second.
//
//	kubectl get bgpsessionstates.herald.io -A
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:categories=herald
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Peer",type=string,JSONPath=`.status.peer`
// +kubebuilder:printcolumn:name="VRF",type=string,JSONPath=`.status.vrf`
// +kubebuilder:printcolumn:name="BGP",type=string,JSONPath=`.status.bgpStatus`
// +kubebuilder:printcolumn:name="BFD",type=string,JSONPath=`.status.bfdStatus`
// +kubebuilder:printcolumn:name="Since",type=date,JSONPath=`.status.lastTransitionTime`
// +kubebuilder:printcolumn:name="Last Error",type=string,JSONPath=`.status.lastError`
// +kubebuilder:printcolumn:name="BGPPeer",type=string,JSONPath=`.status.bgpPeer`,priority=1
// +kubebuilder:printcolumn:name="Advertised",type=integer,JSONPath=`.status.prefixesAdvertised`,priority=1
// +kubebuilder:printcolumn:name="Received",type=integer,JSONPath=`.status.prefixesReceived`,priority=1
type BGPSessionState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is empty (see BGPSessionStateSpec).
	Spec BGPSessionStateSpec `json:"spec,omitempty"`
	// Status is the observed state, written by the node's speaker.
	Status BGPSessionStateStatus `json:"status,omitempty"`
}

// BGPSessionStateList is a list of BGPSessionState.
//
// +kubebuilder:object:root=true
type BGPSessionStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BGPSessionState objects.
	Items []BGPSessionState `json:"items"`
}
