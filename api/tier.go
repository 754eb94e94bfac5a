package api

import "fmt"

// Tier says where the server found a chunk. Its values are the tier byte of a
// batch frame and the numbers of the gRPC enum chunkd.v1.Tier.
type Tier uint8

// The tiers, from fastest to slowest.
const (
	// TierUnspecified is the zero Tier: no tier, as in a reply for a chunk
	// that was not found.
	TierUnspecified Tier = 0
	// TierMemory is the in-memory chunk cache.
	TierMemory Tier = 1
	// TierDisk is a table file fully cached on local disk.
	TierDisk Tier = 2
	// TierPartial is a table file still being downloaded, read from the part
	// already on disk.
	TierPartial Tier = 3
	// TierStore is the remote object store, read directly.
	TierStore Tier = 4
)

var tierNames = [...]string{
	TierUnspecified: "unspecified",
	TierMemory:      "memory",
	TierDisk:        "disk",
	TierPartial:     "partial",
	TierStore:       "store",
}

// String returns the tier's name as the Chunkd-Tier header carries it:
// "memory", "disk", "partial" or "store"; "unspecified" for TierUnspecified,
// and "Tier(N)" for a value this version does not know.
func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("Tier(%d)", uint8(t))
}

// Known reports whether t is one of the tiers this version defines
// (TierUnspecified included).
func (t Tier) Known() bool { return int(t) < len(tierNames) }

// ParseTier reads a tier name as String writes it ("memory", "disk",
// "partial", "store" or "unspecified").
func ParseTier(s string) (Tier, error) {
	for i, name := range tierNames {
		if s == name {
			return Tier(i), nil
		}
	}
	return TierUnspecified, fmt.Errorf("unknown chunk tier %q: want memory, disk, partial or store", clip(s))
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
