package migration

import (
	"net/netip"
	"testing"
	"time"
)

// TestMeasure: the figures of one phase from hand-made records: the
// longest time between two answered ARP probes (also up to the end of the
// phase), probes with two answerers split by whether one was a MetalLB
// speaker shutting down (and by whether Herald's or MetalLB's speaker took
// over), a node's path disappearing between two router
// reads, reads without any path, and the client's lost requests.
func TestMeasure(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a, b := netip.MustParseAddr("198.51.100.200"), netip.MustParseAddr("198.51.100.201")
	m := &monitor{
		v4L2: []netip.Addr{a, b},
		bgp:  []string{"203.0.113.10/32"},
		targets: []target{{svc: "ns/a", ip: a}, {svc: "ns/b", ip: b},
			{svc: "ns/bgp", ip: netip.MustParseAddr("203.0.113.10"), bgp: true}},
		want:     map[string][]string{"ns/a": {"198.51.100.200"}, "ns/b": {"198.51.100.201"}},
		changed:  map[string]string{"ns/b": "[198.51.100.209] at 16:00:01.000"},
		stopping: map[string][][2]time.Time{"n1": {{at(900), at(1100)}}},
		samples: []sample{
			{at: at(0), arp: map[netip.Addr][]string{a: {"n1"}, b: {"n2"}}},
			{at: at(100), paths: map[string][]string{"203.0.113.10/32": {"n1", "n2"}}},
			{at: at(250), arp: map[netip.Addr][]string{a: {}, b: {"n2"}}},
			{at: at(300), paths: map[string][]string{"203.0.113.10/32": {"n2"}}},
			{at: at(500), arp: map[netip.Addr][]string{a: {}, b: {"n2"}}},
			{at: at(700), paths: map[string][]string{"203.0.113.10/32": {}}},
			{at: at(1000), arp: map[netip.Addr][]string{a: {"n1", "n3"}, b: {"n2", "n3"}}},
			{at: at(1500), arp: map[netip.Addr][]string{a: {"n3"}, b: {}}},
			{at: at(2500), arp: map[netip.Addr][]string{a: {"n3"}, b: {}}},
			// outside the phase
			{at: at(9000), arp: map[netip.Addr][]string{a: {"n1", "n2"}, b: {}}},
		},
		reqs: map[netip.Addr][]request{
			a: {{at: at(0), ok: true}, {at: at(400)}, {at: at(1200), ok: true}},
			b: {{at: at(0), ok: true}, {at: at(300), ok: true}},
		},
	}
	rows, _ := m.measure("p", t0, at(3000), nil)
	want := map[string]string{
		"Services whose address changed": "1 of 2",
		"layer 2 (ARP probes every ~0.25 s): longest time between two answered probes of one address": "1.500 s", // b: 1.0 s to 2.5 s (end)
		"BGP: router table reads (× prefix) with no path at all":                                      "1 of 3",
		"BGP: paths withdrawn from the router (prefix × node, a node's path gone between two reads)":  "2",
		"layer 2: client requests lost":                                      "1 of 5",
		"layer 2: longest time between two answered requests of one address": "1.200 s",
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Measure] = r.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	// b at 1000 ms: n2 held it, n3 took it while n2 still answered; no
	// Herald speaker runs yet, so the taker was MetalLB's.
	if got[MeasureDoubleMetalLB] != "1 of 12" || got[MeasureDoubleHerald] != "0 of 12" {
		t.Errorf("%s = %q, want 1 of 12; %s = %q, want 0 of 12", MeasureDoubleMetalLB, got[MeasureDoubleMetalLB],
			MeasureDoubleHerald, got[MeasureDoubleHerald])
	}
	if got[MeasureStoppingMetalLB] != "1 of 12" || got[MeasureStoppingHerald] != "0 of 12" {
		t.Errorf("%s = %q, want 1 of 12; %s = %q, want 0 of 12", MeasureStoppingMetalLB, got[MeasureStoppingMetalLB],
			MeasureStoppingHerald, got[MeasureStoppingHerald])
	}
	// The same doubles with Herald's speaker running on n3: Herald took
	// over from the MetalLB speaker shutting down on n1, and took b from
	// n2 while n2 still answered.
	m.herald = map[string][][2]time.Time{"n3": {{at(800), {}}}}
	rows, _ = m.measure("p", t0, at(3000), nil)
	for _, r := range rows {
		switch r.Measure {
		case MeasureDoubleHerald:
			if r.Value != "1 of 12" || r.Met {
				t.Errorf("%s = %q (met %v), want 1 of 12, not met", r.Measure, r.Value, r.Met)
			}
		case MeasureDoubleMetalLB:
			if r.Value != "0 of 12" {
				t.Errorf("%s = %q, want 0 of 12", r.Measure, r.Value)
			}
		case MeasureStoppingHerald:
			if r.Value != "1 of 12" || r.Met {
				t.Errorf("%s = %q (met %v), want 1 of 12, not met", r.Measure, r.Value, r.Met)
			}
		case MeasureStoppingMetalLB:
			if r.Value != "0 of 12" {
				t.Errorf("%s = %q, want 0 of 12", r.Measure, r.Value)
			}
		}
	}
	// Herald's speaker on n2, the holder of b, and MetalLB's on n3, the
	// taker: a MetalLB takeover (rolling back).
	m.herald = map[string][][2]time.Time{"n2": {{at(0), {}}}}
	rows, _ = m.measure("p", t0, at(3000), nil)
	for _, r := range rows {
		if (r.Measure == MeasureDoubleHerald && r.Value != "0 of 12") || (r.Measure == MeasureDoubleMetalLB && r.Value != "1 of 12") {
			t.Errorf("Herald holding, MetalLB taking: %s = %q", r.Measure, r.Value)
		}
	}
	// A change seen before the phase is not counted again.
	rows, _ = m.measure("p", t0, at(3000), map[string]string{"ns/b": "x"})
	for _, r := range rows {
		if r.Measure == "Services whose address changed" && r.Value != "0 of 2" {
			t.Errorf("change from an earlier phase counted: %s", r.Value)
		}
	}
}
