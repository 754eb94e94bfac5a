package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chunkd/chunkd/api"
)

// child is a "chunkd serve" process.
type child struct {
	cmd  *exec.Cmd
	pid  string
	url  string // http://127.0.0.1:PORT
	grpc string // 127.0.0.1:PORT, or "-" when off
	done chan struct{}
	err  error // from Wait, once done is closed

	mu   sync.Mutex
	logs []string // the last lines of its stderr
}

var listeningLine = regexp.MustCompile(`msg=listening http=(\S+) grpc=(\S+)`)

// startChild runs binary with args (a serve command listening on
// 127.0.0.1:0) and waits until it says where it listens. cg, if not nil,
// holds the process from its start.
func startChild(ctx context.Context, binary string, args, env []string, cg *cgroup) (*child, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	killWithParent(cmd)
	if cg != nil {
		if err := cg.wrap(cmd); err != nil {
			return nil, err
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, pid: strconv.Itoa(cmd.Process.Pid), done: make(chan struct{})}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.logs = append(c.logs, line)
			if len(c.logs) > 200 {
				c.logs = c.logs[len(c.logs)-200:]
			}
			c.mu.Unlock()
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				select {
				case found <- m:
				default:
				}
			}
		}
		c.err = cmd.Wait()
		close(c.done)
	}()
	select {
	case m := <-found:
		c.url, c.grpc = "http://"+m[1], m[2]
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("chunkd serve exited at start (%v):\n%s", c.err, c.tail(20))
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
	}
	c.kill()
	return nil, fmt.Errorf("chunkd serve did not start listening:\n%s", c.tail(20))
}

// tail returns the last n lines of the child's log.
func (c *child) tail(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.logs
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// exited reports whether the process has ended, and how.
func (c *child) exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// stop asks the service to shut down (SIGTERM) and waits; after 30 s it
// kills it.
func (c *child) stop() error {
	if done, err := c.exited(); done {
		return err
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.err
	case <-time.After(30 * time.Second):
		c.kill()
		return errors.New("chunkd serve did not stop in 30 s: killed")
	}
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// cgroup is a memory-limited control group made for one child process,
// under this process's own cgroup (so the machine's accounting still
// covers it).
type cgroup struct {
	version int    // 1 or 2
	dir     string // the cgroup's directory
	limit   int64
	fd      *os.File // v2: the directory, for starting a child in it
}

// newCgroup makes a memory cgroup named name with the given limit: cgroup
// v2 if the memory controller is there and delegable, else the v1 memory
// hierarchy. It fails if neither is writable.
func newCgroup(name string, limit int64) (*cgroup, error) {
	var errs []error
	if cg, err := newCgroup2(name, limit); err == nil {
		return cg, nil
	} else {
		errs = append(errs, fmt.Errorf("cgroup v2: %w", err))
	}
	if cg, err := newCgroup1(name, limit); err == nil {
		return cg, nil
	} else {
		errs = append(errs, fmt.Errorf("cgroup v1: %w", err))
	}
	return nil, errors.Join(errs...)
}

// ownCgroup returns this process's cgroup path for a v1 controller, or
// for v2 when controller is "".
func ownCgroup(controller string) (string, error) {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		if controller != "" {
			for _, c := range strings.Split(parts[1], ",") {
				if c == controller {
					return parts[2], nil
				}
			}
		}
	}
	return "", fmt.Errorf("not in a %q cgroup", controller)
}

// cgroupMount finds the mount point of cgroup2 (controller "") or of the
// v1 hierarchy with controller.
func cgroupMount(controller string) (string, error) {
	raw, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		if controller == "" && f[2] == "cgroup2" {
			return unescapeMount(f[1]), nil
		}
		if controller != "" && f[2] == "cgroup" {
			for _, o := range strings.Split(f[3], ",") {
				if o == controller {
					return unescapeMount(f[1]), nil
				}
			}
		}
	}
	return "", errors.New("not mounted")
}

func writeFile(path, v string) error { return os.WriteFile(path, []byte(v), 0o644) }

// ownCgroupDir is the directory of this process's cgroup in the hierarchy
// of controller ("" for cgroup v2's unified one).
func ownCgroupDir(controller string) (string, error) {
	mnt, err := cgroupMount(controller)
	if err != nil {
		return "", err
	}
	own, err := ownCgroup(controller)
	if err != nil {
		return "", err
	}
	return filepath.Join(mnt, own), nil
}

// makeCgroup makes the cgroup directory dir and writes limit to its
// memory limit file.
func makeCgroup(version int, dir, limitFile string, limit int64) (*cgroup, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	cg := &cgroup{version: version, dir: dir, limit: limit}
	if err := writeFile(filepath.Join(dir, limitFile), strconv.FormatInt(limit, 10)); err != nil {
		cg.remove()
		return nil, err
	}
	return cg, nil
}

func newCgroup2(name string, limit int64) (*cgroup, error) {
	parent, err := ownCgroupDir("")
	if err != nil {
		return nil, err
	}
	ctrl, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	if !slices.Contains(strings.Fields(string(ctrl)), "memory") {
		return nil, fmt.Errorf("memory controller not available in %s", parent)
	}
	sub, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if !slices.Contains(strings.Fields(string(sub)), "memory") {
		if err := writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+memory"); err != nil {
			return nil, fmt.Errorf("enable memory controller for children of %s: %w", parent, err)
		}
	}
	cg, err := makeCgroup(2, filepath.Join(parent, name), "memory.max", limit)
	if err != nil {
		return nil, err
	}
	writeFile(filepath.Join(cg.dir, "memory.swap.max"), "0") // no swap, where swap is accounted
	if cg.fd, err = os.Open(cg.dir); err != nil {
		cg.remove()
		return nil, err
	}
	return cg, nil
}

func newCgroup1(name string, limit int64) (*cgroup, error) {
	parent, err := ownCgroupDir("memory")
	if err != nil {
		return nil, err
	}
	cg, err := makeCgroup(1, filepath.Join(parent, name), "memory.limit_in_bytes", limit)
	if err != nil {
		return nil, err
	}
	// Memory plus swap no higher than memory: no swapping around the limit.
	writeFile(filepath.Join(cg.dir, "memory.memsw.limit_in_bytes"), strconv.FormatInt(limit, 10))
	got, err := os.ReadFile(filepath.Join(cg.dir, "memory.limit_in_bytes"))
	if err != nil || strings.TrimSpace(string(got)) == "" {
		cg.remove()
		return nil, fmt.Errorf("limit not readable back: %v", err)
	}
	if n, _ := strconv.ParseInt(strings.TrimSpace(string(got)), 10, 64); n > limit+(1<<20) {
		cg.remove()
		return nil, fmt.Errorf("limit not applied: wrote %d, reads %d", limit, n)
	}
	return cg, nil
}

// wrap makes cmd start inside the cgroup: for v2 with clone into the
// cgroup; for v1 through a shell that moves itself in and then execs the
// command, so every page the service touches is charged to the cgroup.
func (cg *cgroup) wrap(cmd *exec.Cmd) error {
	if cg.version == 2 {
		intoCgroup(cmd, int(cg.fd.Fd()))
		return nil
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		return err
	}
	args := append([]string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(cg.dir, "cgroup.procs"), cmd.Path}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = sh, args
	return nil
}

func (cg *cgroup) read(v1, v2 string) int64 {
	name := v1
	if cg.version == 2 {
		name = v2
	}
	raw, err := os.ReadFile(filepath.Join(cg.dir, name))
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// peak returns the cgroup's peak memory use (page cache included), or -1.
func (cg *cgroup) peak() int64 { return cg.read("memory.max_usage_in_bytes", "memory.peak") }

// limitHits returns how often the limit was hit (v1 failcnt, v2 the
// "max" event count), or -1.
func (cg *cgroup) limitHits() int64 {
	if cg.version == 1 {
		return cg.read("memory.failcnt", "")
	}
	raw, err := os.ReadFile(filepath.Join(cg.dir, "memory.events"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "max "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return -1
}

// describe says what kind of cgroup this is, for the report.
func (cg *cgroup) describe() string {
	file := "memory.limit_in_bytes"
	if cg.version == 2 {
		file = "memory.max"
	}
	return fmt.Sprintf("cgroup v%d %s, %s = %d", cg.version, cg.dir, file, cg.limit)
}

// remove deletes the cgroup once its processes are gone.
func (cg *cgroup) remove() {
	if cg.fd != nil {
		cg.fd.Close()
	}
	for i := 0; i < 50; i++ {
		if err := os.Remove(cg.dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReady waits until url answers 200.
func waitReady(ctx context.Context, hc *http.Client, url string, timeout time.Duration) error {
	var last error
	return poll(ctx, 50*time.Millisecond, timeout, func() (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		return false, nil
	}, func() error { return fmt.Errorf("%s not ready: %v", url, last) })
}

// poll calls check every interval until it reports done or fails, ctx
// ends, or timeout passes: then it returns late(), which says what did not
// happen in time.
func poll(ctx context.Context, interval, timeout time.Duration, check func() (done bool, err error), late func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		if done, err := check(); done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return late()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// dbInfo asks the service at base for database db's files.
func dbInfo(ctx context.Context, hc *http.Client, base, db string) (api.DBInfo, error) {
	var info api.DBInfo
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+api.DBPath(db), nil)
	resp, err := hc.Do(req)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&info)
	} else {
		err = api.ReadError(resp)
	}
	io.Copy(io.Discard, resp.Body)
	return info, err
}
