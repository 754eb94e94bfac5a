package client

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize/english"

	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/store"
)

// TierStats counts what one tier served.
type TierStats struct {
	// Chunks and Bytes count the chunks this tier answered (decoded
	// bytes). Within one GetMany an address asked for twice counts once.
	Chunks int64
	Bytes  int64
	// Requests counts lookups (memory), HTTP or gRPC requests (service),
	// or ranged reads of chunk records (store).
	Requests int64
	// Time is the time spent waiting on the tier, summed over requests:
	// concurrent requests each count in full, and a hedged read counts in
	// both the service and the store.
	Time time.Duration
}

func (t TierStats) sub(o TierStats) TierStats {
	return TierStats{t.Chunks - o.Chunks, t.Bytes - o.Bytes, t.Requests - o.Requests, t.Time - o.Time}
}

// ServiceTiers counts the chunks the client took from the service by the
// tier the service said it served them from.
type ServiceTiers struct {
	Memory  int64 // the service's memory
	Disk    int64 // a table file on the service's disk
	Partial int64 // a table file still downloading
	Store   int64 // the service read it from the store
	Other   int64 // no tier, or one this version does not know
}

func (s ServiceTiers) sub(o ServiceTiers) ServiceTiers {
	return ServiceTiers{s.Memory - o.Memory, s.Disk - o.Disk, s.Partial - o.Partial, s.Store - o.Store, s.Other - o.Other}
}

// Stats are a client's counters since it was opened (or ResetStats). For
// the counters of one query, take Stats before and after it and Sub them
// (other queries running at the same time count too).
type Stats struct {
	// Gets and Batches count calls of Get and GetMany.
	Gets, Batches int64
	// Memory, Service and Store are per tier.
	Memory, Service, Store TierStats
	// ServiceTiers breaks Service.Chunks down by the service's tier.
	ServiceTiers ServiceTiers
	// NotFound counts addresses no tier had.
	NotFound int64
	// ServiceNotFound counts chunks the service said it does not have
	// (then read from the store).
	ServiceNotFound int64
	// ServiceBad counts chunks from the service that did not hash to
	// their address (then read from the store).
	ServiceBad int64
	// ServiceErrors counts failed service requests: connection failures,
	// error statuses, cut streams. Requests the client canceled itself (a
	// hedge that the store won) do not count.
	ServiceErrors int64
	// ServiceBackoffs counts the times the client started backing off
	// from a service it could not reach.
	ServiceBackoffs int64
	// ServiceSkipped counts calls (a Get, or a GetMany's chunks missing
	// from memory) that went straight to the store because the client was
	// backing off from the service.
	ServiceSkipped int64
	// Hedged counts chunks also asked of the store because the service
	// had not answered within ServiceTimeout.
	Hedged int64
	// StoreHedges counts second requests sent for store reads slower than
	// recent ones (store.Hedge), and StoreHedgeWins those that answered
	// first.
	StoreHedges, StoreHedgeWins int64
	// StoreBad counts chunks from the store that failed their CRC, did not
	// decode, or did not hash to their address.
	StoreBad int64
	// StoreReadBytes counts bytes read from the store: records (with the
	// gaps merged reads span), indexes and dictionaries.
	StoreReadBytes int64
	// ManifestLoads, TablesOpened and MetaReads count reads of the
	// manifest, table-file indexes opened, and ranged reads for indexes
	// and archive dictionaries.
	ManifestLoads, TablesOpened, MetaReads int64
	// LocalReads counts reads served from the service's files on this
	// host (Options.LocalDir), and LocalChunks the chunks they gave. Those
	// chunks count in Store too.
	LocalReads, LocalChunks int64
	// ImageReads counts pages read from a same-host service's page image
	// (Client.OpenImage) with no request, ImageFills those the service
	// filled on request, ImageBad mapped pages that failed their CRC.
	ImageReads, ImageFills, ImageBad int64
}

// Sub returns s minus prev: the counts between two snapshots.
func (s Stats) Sub(prev Stats) Stats {
	return Stats{
		Gets:            s.Gets - prev.Gets,
		Batches:         s.Batches - prev.Batches,
		Memory:          s.Memory.sub(prev.Memory),
		Service:         s.Service.sub(prev.Service),
		Store:           s.Store.sub(prev.Store),
		ServiceTiers:    s.ServiceTiers.sub(prev.ServiceTiers),
		NotFound:        s.NotFound - prev.NotFound,
		ServiceNotFound: s.ServiceNotFound - prev.ServiceNotFound,
		ServiceBad:      s.ServiceBad - prev.ServiceBad,
		ServiceErrors:   s.ServiceErrors - prev.ServiceErrors,
		ServiceBackoffs: s.ServiceBackoffs - prev.ServiceBackoffs,
		ServiceSkipped:  s.ServiceSkipped - prev.ServiceSkipped,
		Hedged:          s.Hedged - prev.Hedged,
		StoreHedges:     s.StoreHedges - prev.StoreHedges,
		StoreHedgeWins:  s.StoreHedgeWins - prev.StoreHedgeWins,
		StoreBad:        s.StoreBad - prev.StoreBad,
		StoreReadBytes:  s.StoreReadBytes - prev.StoreReadBytes,
		ManifestLoads:   s.ManifestLoads - prev.ManifestLoads,
		TablesOpened:    s.TablesOpened - prev.TablesOpened,
		MetaReads:       s.MetaReads - prev.MetaReads,
		LocalReads:      s.LocalReads - prev.LocalReads,
		LocalChunks:     s.LocalChunks - prev.LocalChunks,
		ImageReads:      s.ImageReads - prev.ImageReads,
		ImageFills:      s.ImageFills - prev.ImageFills,
		ImageBad:        s.ImageBad - prev.ImageBad,
	}
}

// String summarizes the stats on one line, for logs and the CLI.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "memory %s %s of %s", count(s.Memory.Chunks, "chunk"), size(s.Memory.Bytes), count(s.Memory.Requests, "lookup"))
	fmt.Fprintf(&b, "; service %s %s in %s, %v", count(s.Service.Chunks, "chunk"), size(s.Service.Bytes), count(s.Service.Requests, "request"), s.Service.Time.Round(time.Microsecond))
	if t := s.ServiceTiers; t != (ServiceTiers{}) {
		fmt.Fprintf(&b, " (memory %d, disk %d, partial %d, store %d", t.Memory, t.Disk, t.Partial, t.Store)
		if t.Other != 0 {
			fmt.Fprintf(&b, ", other %d", t.Other)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, "; store %s %s in %s (%s read), %v", count(s.Store.Chunks, "chunk"), size(s.Store.Bytes), count(s.Store.Requests, "read"), size(s.StoreReadBytes), s.Store.Time.Round(time.Microsecond))
	for _, x := range []struct {
		name string
		n    int64
	}{
		{"not found", s.NotFound},
		{"service not found", s.ServiceNotFound},
		{"service bad", s.ServiceBad},
		{"service errors", s.ServiceErrors},
		{"service backoffs", s.ServiceBackoffs},
		{"service skipped", s.ServiceSkipped},
		{"hedged", s.Hedged},
		{"store hedges", s.StoreHedges},
		{"store hedge wins", s.StoreHedgeWins},
		{"store bad", s.StoreBad},
		{"of them local reads", s.LocalReads},
		{"local chunks", s.LocalChunks},
		{"image pages", s.ImageReads},
		{"image fills", s.ImageFills},
		{"image bad", s.ImageBad},
	} {
		if x.n != 0 {
			fmt.Fprintf(&b, "; %s %d", x.name, x.n)
		}
	}
	return b.String()
}

// count writes n and noun, singular for one: "1 chunk", "2 chunks".
func count(n int64, noun string) string {
	return fmt.Sprintf("%d %s", n, english.PluralWord(int(n), noun, ""))
}

// size formats a byte count.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// counters are the live counters behind Stats.
type counters struct {
	gets, batches                               atomic.Int64
	memChunks, memBytes, memRequests, memTime   atomic.Int64
	svcChunks, svcBytes, svcRequests, svcTime   atomic.Int64
	svcMemory, svcDisk, svcPartial, svcStore    atomic.Int64
	svcOther                                    atomic.Int64
	storeChunks, storeBytes, storeRequests      atomic.Int64
	storeTime                                   atomic.Int64
	notFound, svcNotFound, svcBad, svcErrors    atomic.Int64
	svcBackoffs, svcSkipped, hedged, storeBad   atomic.Int64
	storeReadBytes, manifestLoads, tablesOpened atomic.Int64
	metaReads, localReads, localChunks          atomic.Int64
	imageReads, imageFills, imageBad            atomic.Int64
}

// service counts one chunk taken from the service.
func (c *counters) service(t api.Tier, n int) {
	c.svcChunks.Add(1)
	c.svcBytes.Add(int64(n))
	switch t {
	case api.TierMemory:
		c.svcMemory.Add(1)
	case api.TierDisk:
		c.svcDisk.Add(1)
	case api.TierPartial:
		c.svcPartial.Add(1)
	case api.TierStore:
		c.svcStore.Add(1)
	default:
		c.svcOther.Add(1)
	}
}

// all visits every counter, for reset.
func (c *counters) all() []*atomic.Int64 {
	return []*atomic.Int64{
		&c.gets, &c.batches,
		&c.memChunks, &c.memBytes, &c.memRequests, &c.memTime,
		&c.svcChunks, &c.svcBytes, &c.svcRequests, &c.svcTime,
		&c.svcMemory, &c.svcDisk, &c.svcPartial, &c.svcStore, &c.svcOther,
		&c.storeChunks, &c.storeBytes, &c.storeRequests, &c.storeTime,
		&c.notFound, &c.svcNotFound, &c.svcBad, &c.svcErrors,
		&c.svcBackoffs, &c.svcSkipped, &c.hedged, &c.storeBad,
		&c.storeReadBytes, &c.manifestLoads, &c.tablesOpened, &c.metaReads, &c.localReads, &c.localChunks,
		&c.imageReads, &c.imageFills, &c.imageBad,
	}
}

// Stats returns a snapshot of the client's counters. Counters are read
// one by one, so a snapshot taken during reads may be off by the reads in
// flight.
func (c *Client) Stats() Stats {
	k := &c.ctr
	var hs store.HedgeStats
	if c.hedged != nil {
		hs = c.hedged.Stats()
	}
	base := c.hedgeBase.Load()
	return Stats{
		StoreHedges:    hs.Hedges - base.Hedges,
		StoreHedgeWins: hs.Wins - base.Wins,
		Gets:           k.gets.Load(),
		Batches:        k.batches.Load(),
		Memory:         TierStats{k.memChunks.Load(), k.memBytes.Load(), k.memRequests.Load(), time.Duration(k.memTime.Load())},
		Service:        TierStats{k.svcChunks.Load(), k.svcBytes.Load(), k.svcRequests.Load(), time.Duration(k.svcTime.Load())},
		Store:          TierStats{k.storeChunks.Load(), k.storeBytes.Load(), k.storeRequests.Load(), time.Duration(k.storeTime.Load())},
		ServiceTiers: ServiceTiers{
			Memory: k.svcMemory.Load(), Disk: k.svcDisk.Load(), Partial: k.svcPartial.Load(),
			Store: k.svcStore.Load(), Other: k.svcOther.Load(),
		},
		NotFound:        k.notFound.Load(),
		ServiceNotFound: k.svcNotFound.Load(),
		ServiceBad:      k.svcBad.Load(),
		ServiceErrors:   k.svcErrors.Load(),
		ServiceBackoffs: k.svcBackoffs.Load(),
		ServiceSkipped:  k.svcSkipped.Load(),
		Hedged:          k.hedged.Load(),
		StoreBad:        k.storeBad.Load(),
		StoreReadBytes:  k.storeReadBytes.Load(),
		LocalReads:      k.localReads.Load(),
		LocalChunks:     k.localChunks.Load(),
		ManifestLoads:   k.manifestLoads.Load(),
		TablesOpened:    k.tablesOpened.Load(),
		MetaReads:       k.metaReads.Load(),
		ImageReads:      k.imageReads.Load(),
		ImageFills:      k.imageFills.Load(),
		ImageBad:        k.imageBad.Load(),
	}
}

// ResetStats sets every counter to zero. Prefer Stats and Stats.Sub for
// per-query counts when queries may run concurrently.
func (c *Client) ResetStats() {
	for _, v := range c.ctr.all() {
		v.Store(0)
	}
	if c.hedged != nil {
		hs := c.hedged.Stats()
		c.hedgeBase.Store(&hs)
	}
}
