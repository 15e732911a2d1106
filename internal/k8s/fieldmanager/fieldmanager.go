// Package fieldmanager names Herald's writes to the API server. Every
// create, update and patch a Herald binary sends carries one of these names
// as its field manager (the fieldManager query parameter; controller-runtime's
// client.FieldOwner), so that an object's metadata.managedFields says which
// fields Herald wrote:
//
//	kubectl get servicel2status -n herald-system -o yaml --show-managed-fields
//
// Without one the API server would name the writes after the HTTP user agent
// (the binary's file name, e.g. "speaker"), which another program may share.
// The binaries also use the names as their user agents' product
// (herald-controller/<version>).
package fieldmanager

const (
	// Controller names the controller's writes: Service status (addresses,
	// conditions), IPAddressPool status, its ConfigurationState, the
	// memberlist Secret and the webhook certificate Secret.
	Controller = "herald-controller"
	// Speaker names the speakers' writes: ServiceL2Status, ServiceBGPStatus,
	// BGPSessionState and their ConfigurationState objects.
	Speaker = "herald-speaker"
)
