package bfd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

// A first packet of a peer: Down, Diag 0, Detect Mult 3, My Discriminator
// 0x12345678, Your Discriminator 0, intervals 1 s / 300 ms / 50 ms.
const frrDown = "20400318" + "12345678" + "00000000" + "000f4240" + "000493e0" + "0000c350"

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	base := mustHex(t, frrDown)
	mod := func(f func(b []byte) []byte) []byte {
		b := bytes.Clone(base)
		return f(b)
	}
	tests := []struct {
		name    string
		in      []byte
		want    ControlPacket
		wantErr error
	}{
		{name: "frr down", in: base, want: ControlPacket{
			State: StateDown, DetectMult: 3, MyDiscriminator: 0x12345678,
			DesiredMinTxMicros: 1000000, RequiredMinRxMicros: 300000, RequiredMinEchoRxMicros: 50000}},
		{name: "up with poll, diag 3, C and D", in: mod(func(b []byte) []byte {
			b[0] = 0x20 | 3
			b[1] = 3<<6 | flagPoll | flagCPI | flagDemand
			b[8], b[11] = 0xab, 0x01
			return b
		}), want: ControlPacket{Diag: DiagNeighborSignaledSessionDown, State: StateUp, Poll: true,
			ControlPlaneIndependent: true, Demand: true, DetectMult: 3, MyDiscriminator: 0x12345678,
			YourDiscriminator:  0xab000001,
			DesiredMinTxMicros: 1000000, RequiredMinRxMicros: 300000, RequiredMinEchoRxMicros: 50000}},
		{name: "final, admin down, reserved diag 31", in: mod(func(b []byte) []byte {
			b[0] = 0x20 | 31
			b[1] = flagFinal
			return b
		}), want: ControlPacket{Diag: 31, State: StateAdminDown, Final: true, DetectMult: 3,
			MyDiscriminator: 0x12345678, DesiredMinTxMicros: 1000000, RequiredMinRxMicros: 300000,
			RequiredMinEchoRxMicros: 50000}},
		{name: "trailing bytes beyond Length are ignored", in: append(bytes.Clone(base), 0, 0, 0), want: ControlPacket{
			State: StateDown, DetectMult: 3, MyDiscriminator: 0x12345678,
			DesiredMinTxMicros: 1000000, RequiredMinRxMicros: 300000, RequiredMinEchoRxMicros: 50000}},
		{name: "short", in: base[:23], wantErr: ErrShort},
		{name: "empty", in: nil, wantErr: ErrShort},
		{name: "version 0", in: mod(func(b []byte) []byte { b[0] &= 0x1f; return b }), wantErr: ErrVersion},
		{name: "version 2", in: mod(func(b []byte) []byte { b[0] = 0x40; return b }), wantErr: ErrVersion},
		{name: "length 23", in: mod(func(b []byte) []byte { b[3] = 23; return b }), wantErr: ErrLength},
		{name: "length beyond payload", in: mod(func(b []byte) []byte { b[3] = 26; return b }), wantErr: ErrLength},
		{name: "length 26 without auth", in: mod(func(b []byte) []byte { b[3] = 26; return append(b, 0, 0) }), wantErr: ErrLength},
		{name: "auth refused", in: mod(func(b []byte) []byte {
			b[1] |= flagAuth
			b[3] = 26
			return append(b, 1, 2) // Simple Password, length 2 (truncated)
		}), wantErr: ErrAuthNotSupported},
		{name: "detect mult zero", in: mod(func(b []byte) []byte { b[2] = 0; return b }), wantErr: ErrDetectMult},
		{name: "multipoint", in: mod(func(b []byte) []byte { b[1] |= flagMultipoint; return b }), wantErr: ErrMultipoint},
		{name: "my discriminator zero", in: mod(func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b }), wantErr: ErrMyDiscriminator},
		{name: "poll and final", in: mod(func(b []byte) []byte { b[1] |= flagPoll | flagFinal; return b }), wantErr: ErrPollFinal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Parse error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got != tt.want {
				t.Fatalf("Parse = %+v\nwant %+v", got, tt.want)
			}
			out, err := got.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, tt.in[:PacketLen]) {
				t.Fatalf("MarshalBinary = %x, want %x", out, tt.in[:PacketLen])
			}
		})
	}
}

func TestIntervals(t *testing.T) {
	p, err := Parse(mustHex(t, frrDown))
	if err != nil {
		t.Fatal(err)
	}
	if p.DesiredMinTx() != time.Second || p.RequiredMinRx() != 300*time.Millisecond || p.RequiredMinEchoRx() != 50*time.Millisecond {
		t.Fatalf("intervals %v %v %v", p.DesiredMinTx(), p.RequiredMinRx(), p.RequiredMinEchoRx())
	}
}

// FuzzParse: Parse never panics, and a packet it accepts serializes back to
// the first 24 bytes of its input and parses to the same value.
func FuzzParse(f *testing.F) {
	f.Add(mustHex(f, frrDown))
	f.Add(make([]byte, 24))
	f.Add(append(mustHex(f, frrDown), 1, 2, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		out, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, b[:PacketLen]) {
			t.Fatalf("round trip %x -> %+v -> %x", b[:PacketLen], p, out)
		}
		q, err := Parse(out)
		if err != nil || q != p {
			t.Fatalf("reparse %+v, %v; want %+v", q, err, p)
		}
	})
}
