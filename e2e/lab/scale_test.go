package lab

import "testing"

func TestMetricSum(t *testing.T) {
	const expo = `# HELP herald_memberlist_member_events_total Membership changes.
# TYPE herald_memberlist_member_events_total counter
herald_memberlist_member_events_total{event="failed"} 3
herald_memberlist_member_events_total{event="join"} 40
herald_memberlist_member_events_total{event="leave"} 0
herald_memberlist_members 50
herald_memberlist_members_other 7
rest_client_requests_total{code="200",host="x",method="GET"} 12
rest_client_requests_total{code="201",host="x",method="POST"} 1.5
`
	for _, tc := range []struct {
		metric string
		want   float64
		found  bool
	}{
		{"herald_memberlist_member_events_total", 43, true},
		{`herald_memberlist_member_events_total{event="failed"}`, 3, true},
		{`herald_memberlist_member_events_total{event="join"}`, 40, true},
		{"herald_memberlist_members", 50, true},
		{"rest_client_requests_total", 13.5, true},
		{"herald_memberlist", 0, false},
		{`herald_memberlist_member_events_total{event="other"}`, 0, false},
	} {
		got, found := MetricSum([]byte(expo), tc.metric)
		if got != tc.want || found != tc.found {
			t.Errorf("MetricSum(%s) = %v, %v; want %v, %v", tc.metric, got, found, tc.want, tc.found)
		}
	}
}
