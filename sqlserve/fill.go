package sqlserve

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api"
	"github.com/chunkd/chunkd/cache"
)

// RegisterImage registers the image of addrs (chunks of database db in
// slots of slotSize bytes), making it if it is new and filling it in the
// background, one image at a time, from whatever tier holds its chunks.
func (s *Server) RegisterImage(ctx context.Context, db string, slotSize int, addrs []addr.Addr) (api.ImageInfo, error) {
	return s.registerImage(ctx, db, api.ImageName(slotSize, addrs), slotSize, addrs)
}

// registerImage is RegisterImage of an image already named.
func (s *Server) registerImage(ctx context.Context, db, name string, slotSize int, addrs []addr.Addr) (api.ImageInfo, error) {
	if err := s.c.LoadDB(ctx, db); err != nil {
		return api.ImageInfo{}, err
	}
	im, created, err := s.images.register(db, name, slotSize, addrs)
	if err != nil {
		return api.ImageInfo{}, err
	}
	return s.imageInfo(im, created), nil
}

// Image returns the ImageInfo of image name, registered before (by a
// client of any database: the name proves the addresses), or an error
// of kind cache.KindUnknownImage. Like a registration, it starts the
// background fill of an image found again after a restart.
func (s *Server) Image(ctx context.Context, db, name string) (api.ImageInfo, error) {
	if err := s.c.LoadDB(ctx, db); err != nil {
		return api.ImageInfo{}, err
	}
	im := s.images.get(name)
	if im == nil {
		return api.ImageInfo{}, cache.Errorf(cache.KindUnknownImage, nil, "no image %s (never registered, or evicted: register it)", name)
	}
	return s.imageInfo(im, im.adopt(db)), nil
}

// imageInfo describes im, first starting its background fill when fill
// says so (a new image, or one adopted after a restart).
func (s *Server) imageInfo(im *image, fill bool) api.ImageInfo {
	if fill {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.fillImage(im)
		}()
	}
	return api.ImageInfo{
		Name: im.name, Slots: len(im.addrs), SlotSize: im.slotSize,
		Data:    filepath.ToSlash(filepath.Join(api.CacheImagesDir, im.name+".img")),
		Entries: filepath.ToSlash(filepath.Join(api.CacheImagesDir, im.name+".slots")),
	}
}

// imageSlots returns the number of slots of image name, if it is known.
func (s *Server) imageSlots(name string) (int, bool) {
	im := s.images.get(name)
	if im == nil {
		return 0, false
	}
	return len(im.addrs), true
}

// FillImage fills the given slots of image name (registered by a client
// of database db) and calls fn with each one's bytes, in no particular
// order, from one goroutine at a time. A slot whose chunk db does not hold
// is an error.
func (s *Server) FillImage(ctx context.Context, db, name string, slots []uint32, fn func(slot uint32, data []byte) error) error {
	im := s.images.get(name)
	if im == nil {
		return cache.Errorf(cache.KindUnknownImage, nil, "no image %s (never registered, or evicted: register it again)", name)
	}
	as := make([]addr.Addr, len(slots))
	for k, sl := range slots {
		if int(sl) >= len(im.addrs) {
			return cache.Errorf(cache.KindBadRequest, nil, "slot %d of an image of %d", sl, len(im.addrs))
		}
		as[k] = im.addrs[sl]
	}
	return s.c.GetChunks(ctx, db, as, func(k int, r cache.Result) error {
		if !r.Found {
			return cache.Errorf(cache.KindUnknownChunk, nil, "image %s: database %q does not hold chunk %s of slot %d", name, db, as[k], slots[k])
		}
		if err := im.write(int(slots[k]), r.Data); err != nil && !errors.Is(err, errImageEvicted) {
			return cache.Errorf(cache.KindBadRequest, err, "fill")
		}
		return fn(slots[k], r.Data)
	}, nil)
}

// fillImage fills a new image's empty slots in order, a batch at a time,
// in the background: one image at a time, stopping when the image is
// evicted or the server closes.
func (s *Server) fillImage(im *image) {
	select {
	case s.images.fillSlots <- struct{}{}:
		defer func() { <-s.images.fillSlots }()
	case <-s.ctx.Done():
		return
	}
	start := time.Now()
	const batch = 512
	for first := 0; first < len(im.addrs); first += batch {
		if im.evicted() || s.ctx.Err() != nil {
			return
		}
		var slots []int
		for i := first; i < min(first+batch, len(im.addrs)); i++ {
			if !im.filled(i) {
				slots = append(slots, i)
			}
		}
		if len(slots) == 0 {
			continue
		}
		as := make([]addr.Addr, len(slots))
		for k, i := range slots {
			as[k] = im.addrs[i]
		}
		err := s.c.GetChunks(s.ctx, im.db, as, func(k int, r cache.Result) error {
			if !r.Found {
				return fmt.Errorf("database %q does not hold chunk %s of slot %d", im.db, as[k], slots[k])
			}
			return im.write(slots[k], r.Data)
		}, nil)
		if err != nil {
			if !errors.Is(err, errImageEvicted) && s.ctx.Err() == nil {
				s.log.Warn("image fill stopped; clients fill what they read", "image", im.name, "db", im.db, "err", err)
			}
			return
		}
	}
	s.log.Debug("image filled", "image", im.name, "db", im.db, "slots", len(im.addrs), "took", time.Since(start).Round(time.Millisecond))
}
