package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/chunkd/chunkd/api"
)

// NoLocalDir as Options.LocalDir keeps the client from reading a
// service's cache directory even on its host: every read goes through
// the service's API.
const NoLocalDir = "none"

// hostTimeout bounds the request that asks a service for its cache
// directory: an answer from this host's service takes well under a
// millisecond, and a service that does not answer in time is not one
// whose directory the client could read anyway.
const hostTimeout = time.Second

// findLocalDir settles Options.LocalDir: a directory given is checked to
// be the service's (an error says why it cannot be used); none given, a
// client of an HTTP service at an address of this machine asks it where
// its directory is (api.PatternHost: one request, a fraction of a
// millisecond on loopback; with tokens, only a token that grants the
// database is told) and uses it if it can read it and its host
// file holds the service's token, so that a client on the service's host
// reads its verified files and page images with no request per chunk. A
// directory it cannot use is not an error then: the client reads through
// the API, as it would from another host, which it asks nothing more.
func (c *Client) findLocalDir(ctx context.Context) error {
	dir := c.opts.LocalDir
	switch {
	case dir == NoLocalDir:
		c.opts.LocalDir = ""
		return nil
	case dir != "" && c.svc == nil:
		return fmt.Errorf("client: a service's cache directory (%s) is read only with that service (Options.Service)", dir)
	case c.svc == nil:
		return nil
	}
	h, ok := httpOf(c.svc)
	if !ok { // gRPC: no host info to prove the directory by
		if dir != "" {
			if _, err := os.Stat(filepath.Join(dir, api.CacheLayoutFile)); err != nil {
				return fmt.Errorf("client: %s is not a cache service's directory (no %s): %w", dir, api.CacheLayoutFile, err)
			}
		}
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, hostTimeout)
	defer cancel()
	if dir == "" && !localHost(hctx, h.base) {
		return nil // another host's service: its directory cannot be here
	}
	c.ctr.svcRequests.Add(1)
	info, err := h.hostInfo(hctx)
	if err != nil {
		if dir != "" {
			return fmt.Errorf("client: cannot check that %s is the cache directory of the service at %s: %w", dir, h.base, err)
		}
		c.log.Debug("the service does not say where its cache directory is: reading through its API", "service", h.base, "err", err)
		return nil
	}
	if dir == "" {
		dir = info.Dir
	}
	if err := checkHostFile(dir, info); err != nil {
		if c.opts.LocalDir != "" { // given: it must be usable
			return err
		}
		c.log.Debug("the service's cache directory is not readable here: reading through its API", "dir", dir, "err", err)
		return nil
	}
	c.opts.LocalDir = dir
	c.log.Debug("reading the service's cache directory on this host", "dir", dir, "service", h.base)
	return nil
}

// checkHostFile checks that dir's host file holds info's token: that dir
// is the directory of the service that answered info.
func checkHostFile(dir string, info api.HostInfo) error {
	b, err := os.ReadFile(filepath.Join(dir, api.CacheHostFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("client: service directory %s: %w", dir, serr)
		}
		return fmt.Errorf("client: %s is not the cache directory of a running service (no %s file)", dir, api.CacheHostFile)
	case err != nil:
		return fmt.Errorf("client: service directory %s: %w", dir, err)
	case strings.TrimSpace(string(b)) != info.Token:
		return fmt.Errorf("client: %s is not the cache directory of this service (that is %s on the service's host): its %s file holds another service's token", dir, info.Dir, api.CacheHostFile)
	}
	return nil
}

// LocalDir is the service's cache directory the client reads directly
// ("" when it reads through the API only).
func (c *Client) LocalDir() string { return c.opts.LocalDir }

// hostInfo asks the service where its cache directory is.
func (h *httpService) hostInfo(ctx context.Context) (api.HostInfo, error) {
	req, err := h.newRequest(ctx, http.MethodGet, api.HostPath(h.db), nil)
	if err != nil {
		return api.HostInfo{}, err
	}
	var info api.HostInfo
	if err := h.jsonAnswer(req, "host info", &info, false); err != nil {
		return api.HostInfo{}, err
	}
	if info.Dir == "" || info.Token == "" {
		return api.HostInfo{}, fmt.Errorf("cache service %s: host info names no directory", h.base)
	}
	return info, nil
}

// localHost reports whether the host of URL base is this machine's:
// localhost, or an address (or a name resolving to one) of one of its
// network interfaces, loopback included.
func localHost(ctx context.Context, base string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return false
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true // no need to list the interfaces (a netlink dump, 0.2 ms of a fresh process's CPU time)
		}
	}
	ifaddrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		for _, a := range ifaddrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
