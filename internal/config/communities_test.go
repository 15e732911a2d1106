package config

import "testing"

func TestParseCommunity(t *testing.T) {
	for in, want := range map[string]Community{
		"0:0":                                    {},
		"65535:65281":                            {A: 65535, B: 65281},
		"64500:100":                              {A: 64500, B: 100},
		"large:1:2:3":                            {Large: true, A: 1, B: 2, C: 3},
		"LARGE:4294967294:0:42":                  {Large: true, A: 4294967294, C: 42},
		"large:4294967294:4294967295:4294967295": {Large: true, A: 1<<32 - 2, B: 1<<32 - 1, C: 1<<32 - 1},
	} {
		got, err := ParseCommunity(in)
		if err != nil || got != want {
			t.Errorf("ParseCommunity(%q) = %v, %v; want %v", in, got, err, want)
		}
		back, err := ParseCommunity(got.String())
		if err != nil || back != got {
			t.Errorf("round trip of %q via %q: %v, %v", in, got.String(), back, err)
		}
	}
	if c := (Community{A: 65535, B: 65281}); c.Standard() != 0xFFFFFF01 {
		t.Errorf("Standard() = %#x", c.Standard())
	}
	for _, bad := range []string{"", ":", "1:", ":1", "65536:0", "0:65536", "-1:1", "+1:1", "0x1:1", "1:2:3",
		"large:1:2", "large:1:2:3:4", "large:4294967296:0:0", "large:4294967295:0:0", "LARGE:4294967295:1:2", "large::1:2", "1 :2", "１:2", "1_0:2", "huge:1:2:3"} {
		if c, err := ParseCommunity(bad); err == nil {
			t.Errorf("ParseCommunity(%q) = %v, want error", bad, c)
		}
	}
}

func TestResolveCommunity(t *testing.T) {
	aliases := map[string]CommunityAlias{
		"no-export": {Name: "no-export", Value: Community{A: 65535, B: 65281}},
		"odd:name":  {Name: "odd:name", Value: Community{A: 1, B: 1}},
	}
	for _, tc := range []struct {
		in        string
		want      Community
		transient bool
		err       bool
	}{
		{in: "no-export", want: Community{A: 65535, B: 65281}},
		{in: "odd:name", want: Community{A: 1, B: 1}},
		{in: "7:8", want: Community{A: 7, B: 8}},
		{in: "large:1:2:3", want: Community{Large: true, A: 1, B: 2, C: 3}},
		{in: "blackhole", transient: true, err: true},
		{in: "bad:value", err: true},
		{in: "", err: true},
	} {
		got, transient, err := resolveCommunity(tc.in, aliases)
		if (err != nil) != tc.err || transient != tc.transient || (err == nil && got != tc.want) {
			t.Errorf("resolveCommunity(%q) = %v, %v, %v", tc.in, got, transient, err)
		}
	}
}

func TestCommunityOrder(t *testing.T) {
	a, b, c := Community{A: 1, B: 2}, Community{A: 2, B: 1}, Community{Large: true}
	if a.Compare(b) >= 0 || b.Compare(c) >= 0 || c.Compare(a) <= 0 || a.Compare(a) != 0 {
		t.Errorf("order broken")
	}
}
