// Package configload turns the metallb.io objects in the API server into the
// config.Snapshot the controller and the speakers run on, and keeps the last
// good one in force when a new one is rejected.
//
// It is the only place that lists configuration objects: Read collects
// config.Resources from a (cache-backed) client, Tracker.Update builds them
// with config.Build and decides what is in force, and Reporter writes the
// outcome where users look: the ConfigurationState object of the component,
// and the metallb_k8s_client_config_loaded_bool / _stale_bool gauges.
package configload
