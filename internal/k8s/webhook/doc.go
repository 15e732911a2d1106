// Package webhook is Herald's validating admission webhook for the metallb.io
// objects (IPAddressPool, L2Advertisement, BGPAdvertisement, BGPPeer v1beta2,
// Community, BFDProfile) and the certificates it serves with.
//
// # Judging a change
//
// Every request (CREATE, UPDATE, DELETE) is judged the same way by Reviewer:
// list the stored objects (configload.Read through an uncached API reader),
// apply the change (replace, add or remove the object), and run config.Build
// with IgnoreTransient on the states before and after. config.Build is the
// only validation: the webhook admits exactly what the controller and the
// speakers will run. The refusal text is Build's: kind, namespace/name, field,
// value and rule, e.g.
//
//	configuration rejected: IPAddressPool herald-system/b: spec.addresses[0] "198.51.100.0/25": overlaps IPAddressPool a
//
// A change is refused only for errors it causes: errors that are new after
// the change, and errors that name the object under review. An unrelated
// object that is already invalid (stored before the webhook existed, or
// while it was down) does not block every other change; it is listed in an
// admission warning instead. (MetalLB refuses any change while any stored
// object is invalid.)
//
// Transient errors (a reference to a Secret or Community alias that does not
// exist yet) never block a CREATE or UPDATE, so objects can be applied in any
// order; a BGPAdvertisement naming a Community alias that no stored
// Community defines is admitted with a warning naming the entry and alias. A DELETE that creates such a dangling reference (deleting a
// Community whose alias a BGPAdvertisement still uses) is refused and names
// the referencing object, except while Herald's namespace is terminating.
// Objects created or updated outside Herald's namespace are refused (Herald
// would ignore them); deleting them is allowed. config's warnings (for
// example disableMP is deprecated, BFDProfiles cannot be used) are returned
// as admission warnings when they are new or about the object under review.
// Deleting is never refused for the following, only warned about: an
// L2Advertisement or BGPAdvertisement change that leaves a pool without any
// advertisement (its addresses stay assigned but nothing announces them),
// deleting a BGPPeer or IPAddressPool an advertisement names (a new
// "selects nothing" warning), and deleting a pool, or an update removing
// addresses from it, while its status still counts assigned addresses.
//
// Two admissions running at the same moment are each judged against the
// stored state without the other (two overlapping pools applied in parallel
// can both pass, as with MetalLB); the runtime's own config.Build then
// rejects the combination and keeps the last valid configuration.
//
// BGPPeer is validated as v1beta2 only. The server also answers CRD
// conversion at /convert (controller-runtime's handler over the api/v1beta1
// ConvertTo/ConvertFrom functions) and, with Options.ConversionCRDs, injects
// the caBundle into those CRDs' conversion webhooks. BGPPeer v1beta1 is
// served (as in MetalLB) with v1beta2 the storage version; manifests/base
// and the chart configure the CRD's conversion webhook. A v1beta1 BGPPeer is
// validated by the v1beta2 webhook after conversion (matchPolicy
// Equivalent).
//
// # Certificates
//
// Setup registers the handlers on their own webhook server (port 9443,
// HTTP/1.1 only) and, with Options.CertRotation, runs
// github.com/open-policy-agent/cert-controller's rotator: a self-signed CA
// and a serving certificate for herald-webhook-service.<namespace>.svc in
// Secret herald-webhook-cert, the CA injected as caBundle into every webhook
// of ValidatingWebhookConfiguration herald-webhook-configuration (and the
// Options.ConversionCRDs), renewal 90 days before expiry. Herald copies
// the Secret's tls.crt and tls.key into CertDir itself (manifests/base mounts
// an emptyDir there rather than the Secret, so a renewal takes effect at
// once; Options.SecretMounted turns the copy off). The server starts only once the certificate is in
// CertDir and the caBundle is injected.
//
// The alternative is cert-manager: run the controller with
// --disable-cert-rotation, let a cert-manager Certificate write Secret
// herald-webhook-cert (mounted at --cert-dir), and annotate the
// ValidatingWebhookConfiguration with
// cert-manager.io/inject-ca-from: herald-system/<certificate name> so that
// cert-manager's CA injector fills caBundle. Herald still copies the
// Secret's files into CertDir (or reads them from a mounted Secret with
// Options.SecretMounted).
package webhook
