package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConfigurationResult is the outcome of the last configuration load.
// +kubebuilder:validation:Enum=Valid;Invalid;Unknown
type ConfigurationResult string

// Values of ConfigurationStateStatus.Result.
const (
	ConfigurationResultValid   ConfigurationResult = "Valid"
	ConfigurationResultInvalid ConfigurationResult = "Invalid"
	ConfigurationResultUnknown ConfigurationResult = "Unknown"
)

// Condition types and reasons used in ConfigurationStateStatus.Conditions.
const (
	// ConditionConfigReconcilerValid reports the configuration reconciler.
	ConditionConfigReconcilerValid = "configReconcilerValid"
	// ConditionPoolReconcilerValid reports the pool reconciler.
	ConditionPoolReconcilerValid = "poolReconcilerValid"

	// ReasonConfigurationError: the configuration objects are invalid.
	ReasonConfigurationError = "ConfigurationError"
	// ReasonInfraError: a required object could not be read.
	ReasonInfraError = "InfraError"
	// ReasonReconciled: the configuration was loaded.
	ReasonReconciled = "Reconciled"
	// ReasonUnknownError: any other failure.
	ReasonUnknownError = "UnknownError"

	// LabelComponentType holds "controller" or "speaker".
	LabelComponentType = "metallb.io/component-type"
	// LabelNodeName holds the node of a speaker's ConfigurationState.
	LabelNodeName = "metallb.io/node-name"
)

// ConfigurationStateSpec is empty: the object carries only status.
type ConfigurationStateSpec struct{}

// ConfigurationStateStatus reports whether a component accepted the current
// configuration.
type ConfigurationStateStatus struct {
	// Result is Valid when the last configuration was loaded, Invalid when
	// it was rejected (the previous valid configuration stays in use), and
	// Unknown before the first load.
	// +optional
	Result ConfigurationResult `json:"result,omitempty"`

	// ErrorSummary is a human-readable summary of the errors that made the
	// configuration Invalid; empty when Valid.
	// +optional
	ErrorSummary string `json:"errorSummary,omitempty"`

	// Conditions detail the state per reconciler (types
	// configReconcilerValid, poolReconcilerValid; reasons
	// ConfigurationError, InfraError, Reconciled, UnknownError).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConfigurationState exposes the configuration status of one component: the
// controller writes the object named "controller", each speaker writes
// "speaker-<node>". Labelled with LabelComponentType and LabelNodeName and
// owned by the writing pod.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.result`
// +kubebuilder:printcolumn:name="Error Summary",type=string,JSONPath=`.status.errorSummary`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConfigurationState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state of the ConfigurationState.
	Spec ConfigurationStateSpec `json:"spec,omitempty"`
	// Status is the observed state, written by Herald (see ConfigurationStateStatus).
	Status ConfigurationStateStatus `json:"status,omitempty"`
}

// ConfigurationStateList is a list of ConfigurationState.
//
// +kubebuilder:object:root=true
type ConfigurationStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ConfigurationState objects.
	Items []ConfigurationState `json:"items"`
}
