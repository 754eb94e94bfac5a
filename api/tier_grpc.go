//go:build !chunkd_nogrpc

package api

// The gRPC enum's conversions, in a file of their own: a build without
// gRPC (the chunkd_nogrpc tag: the SQLite extension, which reads services
// over HTTP) links no protobuf or gRPC package through api.

import "github.com/chunkd/chunkd/api/chunkpb"

// Proto returns the gRPC enum value of t. A tier this version does not know
// maps to the enum number of the same value, which protobuf carries as is.
func (t Tier) Proto() chunkpb.Tier { return chunkpb.Tier(t) }

// TierFromProto returns the Tier of a gRPC enum value. Values outside 0..255
// (which no chunkd server sends) become TierUnspecified.
func TierFromProto(p chunkpb.Tier) Tier {
	if p < 0 || p > 255 {
		return TierUnspecified
	}
	return Tier(p)
}
