package api

import (
	"testing"

	"github.com/chunkd/chunkd/addr"
)

// ImageName hashes the addresses in place; it must name what a
// registration's body (EncodeImageRequest) names.
func TestImageName(t *testing.T) {
	var addrs []addr.Addr
	for i := range 1000 {
		addrs = append(addrs, addr.Of([]byte{byte(i), byte(i >> 8)}))
	}
	for _, tc := range []struct {
		slot int
		as   []addr.Addr
	}{{4096, addrs}, {65536, addrs[:1]}, {512, nil}, {4096, addrs[1:]}} {
		got, want := ImageName(tc.slot, tc.as), ImageRequestName(EncodeImageRequest(tc.slot, tc.as))
		if got != want {
			t.Errorf("%d slots of %d bytes: ImageName %s, the body's name %s", len(tc.as), tc.slot, got, want)
		}
	}
	if ImageName(4096, addrs) == ImageName(8192, addrs) || ImageName(4096, addrs) == ImageName(4096, addrs[1:]) {
		t.Error("different images, one name")
	}
}
