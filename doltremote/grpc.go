package doltremote

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/chunkd/chunkd/addr"
	"github.com/chunkd/chunkd/api/remotesapi"
	"github.com/chunkd/chunkd/cache"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errReadOnly answers every write call.
var errReadOnly = status.Error(codes.PermissionDenied, "read-only remote: chunkd serves Dolt remotes for reading only; push to the remote in the store itself")

// observe records a call's latency and status.
func (s *Service) observe(method string, start time.Time, err error) {
	s.metrics.observe(method, status.Code(err).String(), time.Since(start))
}

func (s *Service) GetRepoMetadata(ctx context.Context, req *remotesapi.GetRepoMetadataRequest) (resp *remotesapi.GetRepoMetadataResponse, err error) {
	defer func(start time.Time) { s.observe("GetRepoMetadata", start, err) }(time.Now())
	snap, err := s.snapshot(ctx, req)
	if err != nil {
		return nil, err
	}
	nbf, version := snap.Format, snap.Version
	if nbf == "" { // serving a saved state: the store was unreachable at startup
		nbf = "__DOLT__"
	}
	if version == "" {
		version = "5"
	}
	return &remotesapi.GetRepoMetadataResponse{
		NbfVersion:             nbf,
		NbsVersion:             version,
		StorageSize:            uint64(snap.Size()),
		PushConcurrencyControl: remotesapi.PushConcurrencyControl_PUSH_CONCURRENCY_CONTROL_IGNORE_WORKING_SET,
		Features:               []remotesapi.Feature{remotesapi.Feature_FEATURE_STREAM_CHUNK_LOCATIONS},
	}, nil
}

func (s *Service) Root(ctx context.Context, req *remotesapi.RootRequest) (resp *remotesapi.RootResponse, err error) {
	defer func(start time.Time) { s.observe("Root", start, err) }(time.Now())
	snap, err := s.snapshot(ctx, req)
	if err != nil {
		return nil, err
	}
	return &remotesapi.RootResponse{RootHash: snap.Root[:]}, nil
}

// Rebase asks the service to look at the store again: it re-reads a stale
// manifest, as every call does.
func (s *Service) Rebase(ctx context.Context, req *remotesapi.RebaseRequest) (resp *remotesapi.RebaseResponse, err error) {
	defer func(start time.Time) { s.observe("Rebase", start, err) }(time.Now())
	if _, err := s.snapshot(ctx, req); err != nil {
		return nil, err
	}
	return &remotesapi.RebaseResponse{}, nil
}

func (s *Service) ListTableFiles(ctx context.Context, req *remotesapi.ListTableFilesRequest) (resp *remotesapi.ListTableFilesResponse, err error) {
	defer func(start time.Time) { s.observe("ListTableFiles", start, err) }(time.Now())
	snap, err := s.snapshot(ctx, req)
	if err != nil {
		return nil, err
	}
	resp = &remotesapi.ListTableFilesResponse{RootHash: snap.Root[:]}
	// A client lists the files to read them whole (dolt clone): they are
	// downloaded all at once, not as it asks for each.
	var whole []string
	for _, f := range snap.Files {
		if !f.Appendix { // dolt clone skips appendix files
			whole = append(whole, f.Name)
		}
	}
	if err := s.c.Prefetch(ctx, snap.DB, whole); err != nil {
		return nil, err
	}
	after := s.refreshAfter()
	for _, f := range snap.Files {
		info := &remotesapi.TableFileInfo{
			FileId:       f.Name,
			NumChunks:    uint32(f.Chunks),
			Url:          s.fileURL(ctx, snap.DB, f),
			RefreshAfter: after,
			RefreshRequest: &remotesapi.RefreshTableFileUrlRequest{
				RepoId: req.RepoId, RepoPath: req.RepoPath, RepoToken: req.RepoToken, FileId: f.Name,
			},
			SplitOffset: uint64(f.DataEnd),
		}
		resp.TableFileInfo = append(resp.TableFileInfo, info)
		if f.Appendix {
			resp.AppendixTableFileInfo = append(resp.AppendixTableFileInfo, info)
		}
	}
	return resp, nil
}

func (s *Service) RefreshTableFileUrl(ctx context.Context, req *remotesapi.RefreshTableFileUrlRequest) (resp *remotesapi.RefreshTableFileUrlResponse, err error) {
	defer func(start time.Time) { s.observe("RefreshTableFileUrl", start, err) }(time.Now())
	snap, err := s.snapshot(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, f := range snap.Files {
		if f.Name == req.FileId {
			return &remotesapi.RefreshTableFileUrlResponse{Url: s.fileURL(ctx, snap.DB, f), RefreshAfter: s.refreshAfter()}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "database %q has no table file %q", snap.DB, req.FileId)
}

func (s *Service) HasChunks(ctx context.Context, req *remotesapi.HasChunksRequest) (resp *remotesapi.HasChunksResponse, err error) {
	defer func(start time.Time) { s.observe("HasChunks", start, err) }(time.Now())
	addrs, err := parseHashes(req.Hashes)
	if err != nil {
		return nil, err
	}
	snap, err := s.snapshot(ctx, req)
	if err != nil {
		return nil, err
	}
	has, err := s.c.HasChunks(ctx, snap.DB, addrs)
	if err != nil {
		return nil, toStatus(err)
	}
	resp = &remotesapi.HasChunksResponse{}
	for i, ok := range has {
		if !ok {
			resp.Absent = append(resp.Absent, int32(i))
		}
	}
	return resp, nil
}

func (s *Service) GetDownloadLocations(ctx context.Context, req *remotesapi.GetDownloadLocsRequest) (resp *remotesapi.GetDownloadLocsResponse, err error) {
	defer func(start time.Time) { s.observe("GetDownloadLocations", start, err) }(time.Now())
	return s.downloadLocs(ctx, req)
}

func (s *Service) StreamDownloadLocations(stream grpc.BidiStreamingServer[remotesapi.GetDownloadLocsRequest, remotesapi.GetDownloadLocsResponse]) (err error) {
	defer func(start time.Time) { s.observe("StreamDownloadLocations", start, err) }(time.Now())
	return answerEach(stream, func(req *remotesapi.GetDownloadLocsRequest) (*remotesapi.GetDownloadLocsResponse, error) {
		return s.downloadLocs(stream.Context(), req)
	})
}

// answerEach answers each request of a bidirectional stream with one
// response, in order, until the client closes its side.
func answerEach[Req, Resp any](stream grpc.BidiStreamingServer[Req, Resp], answer func(*Req) (*Resp, error)) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := answer(req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// downloadLocs answers one GetDownloadLocsRequest: one DownloadLoc per
// table file holding some of the chunks, in the order first needed.
func (s *Service) downloadLocs(ctx context.Context, req *remotesapi.GetDownloadLocsRequest) (*remotesapi.GetDownloadLocsResponse, error) {
	addrs, err := parseHashes(req.ChunkHashes)
	if err != nil {
		return nil, err
	}
	snap, locs, files, err := s.locate(ctx, req, addrs)
	if err != nil {
		return nil, err
	}
	after := s.refreshAfter()
	byFile := map[string]*remotesapi.HttpGetRange{}
	resp := &remotesapi.GetDownloadLocsResponse{}
	for i, l := range locs {
		if l.File == "" {
			continue // absent: left out, as the protocol says
		}
		g := byFile[l.File]
		if g == nil {
			f := files[l.File]
			g = &remotesapi.HttpGetRange{Url: s.fileURL(ctx, snap.DB, f)}
			byFile[l.File] = g
			resp.Locs = append(resp.Locs, &remotesapi.DownloadLoc{
				Location:     &remotesapi.DownloadLoc_HttpGetRange{HttpGetRange: g},
				RefreshAfter: after,
				RefreshRequest: &remotesapi.RefreshTableFileUrlRequest{
					RepoId: req.RepoId, RepoPath: req.RepoPath, RepoToken: req.RepoToken, FileId: f.Name,
				},
			})
		}
		g.Ranges = append(g.Ranges, &remotesapi.RangeChunk{
			Hash: req.ChunkHashes[i], Offset: l.Offset, Length: l.Length,
			DictionaryOffset: l.DictOffset, DictionaryLength: l.DictLength,
		})
	}
	return resp, nil
}

func (s *Service) StreamChunkLocations(stream grpc.BidiStreamingServer[remotesapi.StreamChunkLocationsRequest, remotesapi.StreamChunkLocationsResponse]) (err error) {
	defer func(start time.Time) { s.observe("StreamChunkLocations", start, err) }(time.Now())
	ctx := stream.Context()
	// Table file ids are this stream's: each file is introduced once, by
	// (database, URL), since every request names its repository again.
	ids := map[string]uint32{}
	return answerEach(stream, func(req *remotesapi.StreamChunkLocationsRequest) (*remotesapi.StreamChunkLocationsResponse, error) {
		if len(req.ChunkHashes)%addr.Size != 0 {
			return nil, status.Errorf(codes.InvalidArgument, "chunk_hashes is %d bytes, not a multiple of %d", len(req.ChunkHashes), addr.Size)
		}
		addrs := make([]addr.Addr, len(req.ChunkHashes)/addr.Size)
		for i := range addrs {
			copy(addrs[i][:], req.ChunkHashes[i*addr.Size:])
		}
		snap, locs, files, err := s.locate(ctx, req, addrs)
		if err != nil {
			return nil, err
		}
		resp := &remotesapi.StreamChunkLocationsResponse{}
		for i, l := range locs {
			if l.File == "" {
				resp.MissingIndexes = append(resp.MissingIndexes, uint32(i))
				continue
			}
			url := s.fileURL(ctx, snap.DB, files[l.File])
			id, ok := ids[url]
			if !ok {
				id = uint32(len(ids))
				ids[url] = id
				resp.TableFiles = append(resp.TableFiles, &remotesapi.StreamChunkLocationsResponse_TableFileRecord{
					TableFileId: id, Url: url, RefreshAfter: s.refreshAfter(), FileId: l.File,
				})
			}
			resp.Locations = append(resp.Locations, &remotesapi.StreamChunkLocationsResponse_ChunkLocation{
				TableFileId: id, RequestIndex: uint32(i), Offset: l.Offset, Length: l.Length,
				DictionaryOffset: l.DictOffset, DictionaryLength: l.DictLength,
			})
		}
		return resp, nil
	})
}

func (s *Service) GetUploadLocations(ctx context.Context, req *remotesapi.GetUploadLocsRequest) (resp *remotesapi.GetUploadLocsResponse, err error) {
	defer func(start time.Time) { s.observe("GetUploadLocations", start, err) }(time.Now())
	return nil, s.refuseWrite(ctx, req)
}

func (s *Service) AddTableFiles(ctx context.Context, req *remotesapi.AddTableFilesRequest) (resp *remotesapi.AddTableFilesResponse, err error) {
	defer func(start time.Time) { s.observe("AddTableFiles", start, err) }(time.Now())
	return nil, s.refuseWrite(ctx, req)
}

func (s *Service) Commit(ctx context.Context, req *remotesapi.CommitRequest) (resp *remotesapi.CommitResponse, err error) {
	defer func(start time.Time) { s.observe("Commit", start, err) }(time.Now())
	return nil, s.refuseWrite(ctx, req)
}

// refuseWrite answers a write call: an unknown repository is still
// NOT_FOUND (the client has the wrong URL), any other one read-only.
func (s *Service) refuseWrite(ctx context.Context, req repoRequest) error {
	if _, err := s.resolve(ctx, req); err != nil {
		return err
	}
	return errReadOnly
}

// locate resolves a request's repository and locates addrs in it. files
// has every file a location names.
func (s *Service) locate(ctx context.Context, req repoRequest, addrs []addr.Addr) (snap cache.Snapshot, locs []cache.Location, files map[string]cache.FileInfo, err error) {
	if snap, err = s.snapshot(ctx, req); err != nil {
		return snap, nil, nil, err
	}
	if locs, err = s.c.Locate(ctx, snap.DB, addrs); err != nil {
		return snap, nil, nil, toStatus(err)
	}
	files = make(map[string]cache.FileInfo, len(snap.Files))
	for _, f := range snap.Files {
		files[f.Name] = f
	}
	for _, l := range locs {
		if _, ok := files[l.File]; l.File != "" && !ok {
			// A manifest read between the two calls added the file.
			return snap, nil, nil, status.Errorf(codes.Unavailable, "database %q changed while its chunks were located; ask again", snap.DB)
		}
	}
	return snap, locs, files, nil
}

// parseHashes parses addresses sent as repeated bytes.
func parseHashes(raw [][]byte) ([]addr.Addr, error) {
	out := make([]addr.Addr, len(raw))
	for i, b := range raw {
		a, err := addr.FromBytes(b)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "hash %d: %v", i, err)
		}
		out[i] = a
	}
	return out, nil
}
