package configload

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/config"
)

// Metrics are the k8s-client metrics MetalLB exports from both binaries,
// with MetalLB's names so existing alerts (MetalLBStaleConfig,
// MetalLBConfigNotLoaded) keep working.
type Metrics struct {
	Updates      prometheus.Counter // metallb_k8s_client_updates_total
	UpdateErrors prometheus.Counter // metallb_k8s_client_update_errors_total
	Loaded       prometheus.Gauge   // metallb_k8s_client_config_loaded_bool
	Stale        prometheus.Gauge   // metallb_k8s_client_config_stale_bool
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := NewUnregisteredMetrics()
	reg.MustRegister(m.collectors()...)
	return m
}

// NewUnregisteredMetrics creates the metrics without registering them; call
// Register once they mean something. The controller registers them when it
// starts leading: a standby runs no configuration loop, and a
// config_loaded_bool of 0 from it would fire MetalLBConfigNotLoaded /
// MetalLBConfigNotLoaded for as long as it waits.
func NewUnregisteredMetrics() *Metrics {
	return &Metrics{
		Updates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "k8s_client", Name: "updates_total",
			Help: "Number of configuration updates processed.",
		}),
		UpdateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "metallb", Subsystem: "k8s_client", Name: "update_errors_total",
			Help: "Number of configuration updates that failed (invalid or unreadable configuration), or were put in force without some of their objects (a BGPPeer whose password Secret is missing).",
		}),
		Loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "metallb", Subsystem: "k8s_client", Name: "config_loaded_bool",
			Help: "1 if a valid configuration has been loaded (and is in force), else 0.",
		}),
		Stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "metallb", Subsystem: "k8s_client", Name: "config_stale_bool",
			Help: "1 if the stored configuration was rejected and an older valid one is in force, or is in force without some of its objects (a BGPPeer whose password Secret is missing), else 0.",
		}),
	}
}

// MetricDescs describes MetalLB's metallb_k8s_client_* metrics as both
// binaries register them (names and variable labels, for documentation and
// dashboard checks).
func MetricDescs() []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range NewUnregisteredMetrics().collectors() {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// Register registers the metrics on reg; it returns the registration
// errors (prometheus.AlreadyRegisteredError when called twice).
func (m *Metrics) Register(reg prometheus.Registerer) error {
	var errs []error
	for _, c := range m.collectors() {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Updates, m.UpdateErrors, m.Loaded, m.Stale}
}

// Observe records one Update outcome: the snapshot in force afterwards and
// what happened. An update put in force without some of its objects
// (snap.Dropped, with config.Options.DropTransient) counts as failed and
// marks the configuration stale, as a rejection does: what is in force is
// not what is stored, and MetalLB (which rejects such a configuration
// whole) alerts on exactly these series (MetalLBStaleConfig).
func (m *Metrics) Observe(snap *config.Snapshot, o Outcome) {
	m.Updates.Inc()
	if o == Rejected || (snap != nil && len(snap.Dropped()) > 0) {
		m.UpdateErrors.Inc()
		m.Stale.Set(1)
	} else {
		m.Stale.Set(0)
	}
	if snap != nil {
		m.Loaded.Set(1)
	} else {
		m.Loaded.Set(0)
	}
}

// Reporter writes a component's ConfigurationState object: named
// "controller" or "speaker-<node>", in Herald's namespace, labelled with
// metallb.io/component-type (and metallb.io/node-name for speakers).
type Reporter struct {
	Client    client.Client
	Namespace string
	Name      string
	Labels    map[string]string
	// Owner, when set, becomes the object's owner (the component's Pod), so
	// the object goes away with it.
	Owner *metav1.OwnerReference
}

// Report records the result of a configuration load: Valid when err is nil,
// else Invalid with err's text as errorSummary (the previous valid
// configuration stays in force, and the summary says so). infra marks an error
// that is not about the configuration itself (a list failed): the condition
// reason is then InfraError. It creates the object when missing.
func (r *Reporter) Report(ctx context.Context, err error, infra bool) error {
	status := v1beta1.ConfigurationStateStatus{Result: v1beta1.ConfigurationResultValid}
	cond := metav1.Condition{
		Type:    v1beta1.ConditionConfigReconcilerValid,
		Status:  metav1.ConditionTrue,
		Reason:  v1beta1.ReasonReconciled,
		Message: "configuration loaded",
	}
	if err != nil {
		status.Result = v1beta1.ConfigurationResultInvalid
		status.ErrorSummary = Summary(err)
		cond.Status = metav1.ConditionFalse
		cond.Reason = v1beta1.ReasonConfigurationError
		if infra {
			cond.Reason = v1beta1.ReasonInfraError
		}
		cond.Message = status.ErrorSummary
	}
	obj := &v1beta1.ConfigurationState{}
	key := client.ObjectKey{Namespace: r.Namespace, Name: r.Name}
	getErr := r.Client.Get(ctx, key, obj)
	if apierrors.IsNotFound(getErr) {
		obj = &v1beta1.ConfigurationState{ObjectMeta: metav1.ObjectMeta{
			Namespace: r.Namespace, Name: r.Name, Labels: r.Labels,
		}}
		if r.Owner != nil {
			obj.OwnerReferences = []metav1.OwnerReference{*r.Owner}
		}
		if err := r.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ConfigurationState %s: %w", key, err)
		}
		if err := r.Client.Get(ctx, key, obj); err != nil {
			return fmt.Errorf("get ConfigurationState %s: %w", key, err)
		}
	} else if getErr != nil {
		return fmt.Errorf("get ConfigurationState %s: %w", key, getErr)
	}
	conds := obj.Status.Conditions
	meta.SetStatusCondition(&conds, cond)
	status.Conditions = conds
	if obj.Status.Result == status.Result && obj.Status.ErrorSummary == status.ErrorSummary &&
		equalConditions(obj.Status.Conditions, status.Conditions) {
		return nil
	}
	obj.Status = status
	if err := r.Client.Status().Update(ctx, obj); err != nil {
		return fmt.Errorf("update ConfigurationState %s status: %w", key, err)
	}
	return nil
}

// Summary renders a build error for errorSummary and events: one line per
// problem, invalid ones first, each naming object and field.
func Summary(err error) string {
	if err == nil {
		return ""
	}
	invalid, transient := config.Split(err)
	if len(invalid) == 0 && len(transient) == 0 {
		return err.Error()
	}
	var lines []string
	for _, e := range invalid {
		lines = append(lines, e.Error())
	}
	for _, e := range transient {
		lines = append(lines, e.Error()+" (waiting for it)")
	}
	return strings.Join(lines, "\n")
}

func equalConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason || a[i].Message != b[i].Message {
			return false
		}
	}
	return true
}
