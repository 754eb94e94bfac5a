package store

import (
	"context"
	"sync/atomic"
)

// Origin says whether a read was answered by the object store itself or
// from elsewhere: a wrapper that answers some reads from a copy beside the
// store (a cluster's other nodes) marks them, so that a caller counting
// what the store cost counts only the store's own bytes.
type Origin struct{ elsewhere atomic.Bool }

type originKey struct{}

// TrackOrigin returns ctx carrying a new Origin for one read made with it.
func TrackOrigin(ctx context.Context) (context.Context, *Origin) {
	o := &Origin{}
	return context.WithValue(ctx, originKey{}, o), o
}

// MarkElsewhere records, on the Origin ctx carries (if any), that the read
// made with ctx was answered from elsewhere than the store.
func MarkElsewhere(ctx context.Context) {
	if o, ok := ctx.Value(originKey{}).(*Origin); ok {
		o.elsewhere.Store(true)
	}
}

// Elsewhere reports whether the read was answered from elsewhere than the
// store (MarkElsewhere).
func (o *Origin) Elsewhere() bool { return o != nil && o.elsewhere.Load() }
