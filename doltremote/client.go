package doltremote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/chunkd/chunkd/api/remotesapi"
	"golang.org/x/sync/errgroup"
)

// Client makes the requests a Dolt client makes of a remote, for tests
// and benchmarks that cannot run dolt itself.
type Client struct {
	RPC  remotesapi.ChunkStoreServiceClient
	HTTP *http.Client // default http.DefaultClient
	Repo string       // the repository path, ORG/REPO
}

// cloneDownloads is how many table files dolt clone downloads at once.
const cloneDownloads = 3

// CloneResult is what Clone got.
type CloneResult struct {
	Root  []byte
	Files []string // the table files downloaded, named as in their URLs
	Bytes int64
}

// Clone makes dolt clone's requests: GetRepoMetadata, Root and
// ListTableFiles, then a GET of every table file that is not an appendix
// file, three at a time. It writes the files into dir under the names
// their URLs end in, or discards them if dir is "". A file whose body is
// not its Content-Length long is an error.
func (c *Client) Clone(ctx context.Context, dir string) (CloneResult, error) {
	var res CloneResult
	md, err := c.RPC.GetRepoMetadata(ctx, &remotesapi.GetRepoMetadataRequest{
		RepoPath: c.Repo, ClientRepoFormat: &remotesapi.ClientRepoFormat{NbfVersion: "__DOLT__", NbsVersion: "5"},
	})
	if err != nil {
		return res, fmt.Errorf("GetRepoMetadata: %w", err)
	}
	if md.StorageSize == 0 {
		return res, errors.New("the remote holds no data")
	}
	root, err := c.RPC.Root(ctx, &remotesapi.RootRequest{RepoPath: c.Repo})
	if err != nil {
		return res, fmt.Errorf("Root: %w", err)
	}
	res.Root = root.RootHash
	list, err := c.RPC.ListTableFiles(ctx, &remotesapi.ListTableFilesRequest{RepoPath: c.Repo})
	if err != nil {
		return res, fmt.Errorf("ListTableFiles: %w", err)
	}
	appendix := map[string]bool{}
	for _, f := range list.AppendixTableFileInfo {
		appendix[f.FileId] = true
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cloneDownloads)
	for _, f := range list.TableFileInfo {
		if appendix[f.FileId] {
			continue
		}
		g.Go(func() error {
			name, n, err := c.download(gctx, f.Url, dir)
			if err != nil {
				return fmt.Errorf("table file %s: %w", f.FileId, err)
			}
			mu.Lock()
			res.Files = append(res.Files, name)
			res.Bytes += n
			mu.Unlock()
			return nil
		})
	}
	return res, g.Wait()
}

func (c *Client) download(ctx context.Context, url, dir string) (string, int64, error) {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return "", 0, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	name := path.Base(req.URL.Path)
	w := io.Discard
	if dir != "" {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return "", 0, err
		}
		defer f.Close()
		w = f
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return "", n, fmt.Errorf("GET %s: %w", url, err)
	}
	if n != resp.ContentLength {
		return "", n, fmt.Errorf("GET %s: got %d bytes, Content-Length %d", url, n, resp.ContentLength)
	}
	if f, ok := w.(*os.File); ok {
		if err := f.Close(); err != nil {
			return "", n, err
		}
	}
	return name, n, nil
}
