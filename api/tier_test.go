package api

import (
	"strings"
	"testing"

	"github.com/chunkd/chunkd/api/chunkpb"
)

func TestTier(t *testing.T) {
	for _, c := range []struct {
		tier  Tier
		name  string
		proto chunkpb.Tier
	}{
		{TierUnspecified, "unspecified", chunkpb.Tier_TIER_UNSPECIFIED},
		{TierMemory, "memory", chunkpb.Tier_TIER_MEMORY},
		{TierDisk, "disk", chunkpb.Tier_TIER_DISK},
		{TierPartial, "partial", chunkpb.Tier_TIER_PARTIAL},
		{TierStore, "store", chunkpb.Tier_TIER_STORE},
	} {
		if got := c.tier.String(); got != c.name {
			t.Errorf("%d.String() = %q, want %q", c.tier, got, c.name)
		}
		if got, err := ParseTier(c.name); err != nil || got != c.tier {
			t.Errorf("ParseTier(%q) = %v, %v", c.name, got, err)
		}
		if got := c.tier.Proto(); got != c.proto {
			t.Errorf("%v.Proto() = %v, want %v", c.tier, got, c.proto)
		}
		if got := TierFromProto(c.proto); got != c.tier {
			t.Errorf("TierFromProto(%v) = %v, want %v", c.proto, got, c.tier)
		}
		if want := "TIER_" + strings.ToUpper(c.name); c.proto.String() != want {
			t.Errorf("proto name %q, want %q", c.proto.String(), want)
		}
		if !c.tier.Known() {
			t.Errorf("%v not Known", c.tier)
		}
	}
	if n := len(chunkpb.Tier_name); n != len(tierNames) {
		t.Errorf("the proto enum has %d values, Tier %d", n, len(tierNames))
	}
	if got := Tier(9).String(); got != "Tier(9)" || Tier(9).Known() {
		t.Errorf("Tier(9): %q", got)
	}
	if TierFromProto(9) != Tier(9) || TierFromProto(-1) != TierUnspecified || TierFromProto(256) != TierUnspecified {
		t.Error("TierFromProto out of range")
	}
	for _, bad := range []string{"", "Memory", "ram", "Tier(9)"} {
		if _, err := ParseTier(bad); err == nil {
			t.Errorf("ParseTier(%q): no error", bad)
		}
	}
}
