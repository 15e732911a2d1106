package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels the speaker puts on ServiceL2Status and ServiceBGPStatus objects so
// they can be listed per node and per Service.
const (
	// LabelNode holds the name of the node that announces the Service.
	LabelNode = "metallb.io/node"
	// LabelServiceName holds the name of the announced Service.
	LabelServiceName = "metallb.io/service-name"
	// LabelServiceNamespace holds the namespace of the announced Service.
	LabelServiceNamespace = "metallb.io/service-namespace"
)

// ServiceStatusCommon is the part of the status shared by ServiceL2Status and
// ServiceBGPStatus. Every field is immutable once set.
type ServiceStatusCommon struct {
	// Node is the name of the node announcing the Service. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="node is immutable"
	Node string `json:"node,omitempty"`

	// ServiceName is the name of the announced Service. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceName is immutable"
	ServiceName string `json:"serviceName,omitempty"`

	// ServiceNamespace is the namespace of the announced Service. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceNamespace is immutable"
	ServiceNamespace string `json:"serviceNamespace,omitempty"`
}

// ServiceL2StatusSpec is empty: the object is written by the speaker and
// carries only status.
type ServiceL2StatusSpec struct{}

// ServiceL2StatusStatus says which node announces a Service at layer 2 and
// on which interfaces.
type ServiceL2StatusStatus struct {
	ServiceStatusCommon `json:",inline"`

	// Interfaces are the node's interfaces the Service's addresses are
	// announced on.
	// +optional
	Interfaces []InterfaceInfo `json:"interfaces,omitempty"`
}

// InterfaceInfo names a network interface of a node.
type InterfaceInfo struct {
	// Name is the interface name, e.g. "eth0".
	// +optional
	Name string `json:"name,omitempty"`
}

// ServiceL2Status reports which node won the layer 2 election for a Service.
// The winning speaker creates it (generateName "l2-") in Herald's namespace,
// labelled with LabelNode, LabelServiceName and LabelServiceNamespace, and
// owned by the speaker pod; a speaker that stops announcing deletes its own.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Service Name",type=string,JSONPath=`.status.serviceName`
// +kubebuilder:printcolumn:name="Service Namespace",type=string,JSONPath=`.status.serviceNamespace`
type ServiceL2Status struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the ServiceL2Status.
	Spec ServiceL2StatusSpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see ServiceL2StatusStatus).
	Status ServiceL2StatusStatus `json:"status,omitempty"`
}

// ServiceL2StatusList is a list of ServiceL2Status.
//
// +kubebuilder:object:root=true
type ServiceL2StatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ServiceL2Status objects.
	Items []ServiceL2Status `json:"items"`
}

// ServiceBGPStatusSpec is empty: the object is written by the speaker and
// carries only status.
type ServiceBGPStatusSpec struct{}

// ServiceBGPStatusStatus says which node announces a Service over BGP and to
// which peers.
type ServiceBGPStatusStatus struct {
	ServiceStatusCommon `json:",inline"`

	// Peers are the names of the BGPPeer objects the Service is configured
	// to be announced to. The state of the sessions is not reflected here.
	// +optional
	Peers []string `json:"peers,omitempty"`
}

// ServiceBGPStatus reports that a node announces a Service over BGP. Each
// announcing speaker creates one (generateName "bgp-") in Herald's
// namespace, with the same labels and owner as ServiceL2Status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Service Name",type=string,JSONPath=`.status.serviceName`
// +kubebuilder:printcolumn:name="Service Namespace",type=string,JSONPath=`.status.serviceNamespace`
type ServiceBGPStatus struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the ServiceBGPStatus.
	Spec ServiceBGPStatusSpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see ServiceBGPStatusStatus).
	Status ServiceBGPStatusStatus `json:"status,omitempty"`
}

// ServiceBGPStatusList is a list of ServiceBGPStatus.
//
// +kubebuilder:object:root=true
type ServiceBGPStatusList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ServiceBGPStatus objects.
	Items []ServiceBGPStatus `json:"items"`
}
