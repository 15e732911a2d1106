package allocation

import (
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/k8s/fieldmanager"
	"github.com/herald-lb/herald/internal/poll"
)

// The package's own writes, Service status and IPAddressPool status, name
// the controller in managedFields whatever the client's user agent (here
// the test binary's), so `kubectl get --show-managed-fields` says Herald
// wrote them. The ConfigurationState goes through the binary's client
// (controller's TestStartsDuringAPIOutage checks it).
func TestStatusWritesNameFieldManager(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/28"})
	f.start()
	f.svc("a")
	f.waitIPs("a", "198.51.100.0")
	poll.Until(t, 30*time.Second, "status writes by "+fieldmanager.Controller, func() error {
		pool := &v1beta1.IPAddressPool{}
		if err := f.c.Get(f.ctx(), client.ObjectKey{Namespace: f.herald, Name: "pool-a"}, pool); err != nil {
			return err
		}
		if pool.Status.AssignedIPv4 != 1 {
			return fmt.Errorf("pool status %+v", pool.Status)
		}
		for _, obj := range []client.Object{f.get("a"), pool} {
			status := 0
			for _, m := range obj.GetManagedFields() {
				if m.Subresource != "status" {
					continue // the test's own create
				}
				status++
				if m.Manager != fieldmanager.Controller {
					return fmt.Errorf("%T %s: %s of status by field manager %q, want %q", obj, obj.GetName(), m.Operation, m.Manager, fieldmanager.Controller)
				}
			}
			if status == 0 {
				return fmt.Errorf("%T %s: no status write in managedFields", obj, obj.GetName())
			}
		}
		return nil
	})
}
