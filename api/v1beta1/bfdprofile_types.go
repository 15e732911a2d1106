package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BFDProfileSpec holds the Bidirectional Forwarding Detection (RFC 5880)
// parameters a BGPPeer can refer to.
//
// Herald's speaker runs BFD itself (asynchronous mode; single hop RFC 5881,
// multihop RFC 5883) for every BGPPeer whose bfdProfile names the profile.
// Echo mode is not implemented: echoMode true is refused.
type BFDProfileSpec struct {
	// ReceiveInterval is the minimum interval between received BFD control
	// packets this system is capable of, in milliseconds, 10..60000.
	// FRR's default is 300.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	ReceiveInterval *uint32 `json:"receiveInterval,omitempty"`

	// TransmitInterval is the minimum interval between sent BFD control
	// packets, in milliseconds, 10..60000. FRR's default is 300.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	TransmitInterval *uint32 `json:"transmitInterval,omitempty"`

	// DetectMultiplier is the number of missed packets after which the
	// session is declared down, 2..255. FRR's default is 3.
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=255
	DetectMultiplier *uint32 `json:"detectMultiplier,omitempty"`

	// EchoInterval is the minimum interval between echo packets, in
	// milliseconds, 10..60000. FRR's default is 50. Validated, unused by
	// Herald (no echo mode).
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	EchoInterval *uint32 `json:"echoInterval,omitempty"`

	// EchoMode enables echo packets. Not possible on a peer that receives
	// IPv6 prefixes. Default false. Refused by Herald (webhook and
	// ConfigurationState): it has no Echo function (RFC 5880 §6.4).
	// +optional
	EchoMode *bool `json:"echoMode,omitempty"`

	// PassiveMode makes the system wait for the peer's first control packet
	// instead of sending its own. Default false.
	// +optional
	PassiveMode *bool `json:"passiveMode,omitempty"`

	// MinimumTTL is the minimum expected TTL of incoming BFD packets, 1..254,
	// for multi-hop sessions only (single-hop packets must arrive with TTL
	// 255, RFC 5881 §5). Default 254.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=254
	MinimumTTL *uint32 `json:"minimumTtl,omitempty"`
}

// BFDProfileStatus is empty; it exists so MetalLB objects carrying a status
// apply unchanged.
type BFDProfileStatus struct{}

// BFDProfile is a named set of BFD parameters referenced by BGPPeer.bfdProfile
// (see BFDProfileSpec).
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Passive Mode",type=boolean,JSONPath=`.spec.passiveMode`
// +kubebuilder:printcolumn:name="Transmit Interval",type=integer,JSONPath=`.spec.transmitInterval`
// +kubebuilder:printcolumn:name="Receive Interval",type=integer,JSONPath=`.spec.receiveInterval`
// +kubebuilder:printcolumn:name="Multiplier",type=integer,JSONPath=`.spec.detectMultiplier`
type BFDProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the BFDProfile.
	Spec BFDProfileSpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see BFDProfileStatus).
	Status BFDProfileStatus `json:"status,omitempty"`
}

// BFDProfileList is a list of BFDProfile.
//
// +kubebuilder:object:root=true
type BFDProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the BFDProfile objects.
	Items []BFDProfile `json:"items"`
}
