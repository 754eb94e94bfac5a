package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/chunkd/chunkd/internal/shellquote"
	"github.com/dustin/go-humanize"
)

// Environment is the report's environment block: what the figures depend
// on besides the code (the articles' lesson: the disk, fsync, the store's
// distance and the cache sizes change results more than most patches do).
type Environment struct {
	Date        string `json:"date"`
	CommandLine string `json:"command_line"`
	Suite       string `json:"suite"`
	Scale       string `json:"scale"`
	Runs        int    `json:"runs"`
	Took        string `json:"took"`

	ChunkdVersion string `json:"chunkd_version"`
	GitCommit     string `json:"git_commit"`
	GitModified   string `json:"git_modified"` // "yes", "no" or "unknown"
	GoVersion     string `json:"go_version"`

	CPUModel      string `json:"cpu_model"`
	Cores         int    `json:"cores"`
	GOMAXPROCS    int    `json:"gomaxprocs"`
	MemTotalBytes int64  `json:"mem_total_bytes"`
	OS            string `json:"os"`
	Kernel        string `json:"kernel"` // uname -srvm
	LoadAvgStart  string `json:"loadavg_start"`
	LoadAvgEnd    string `json:"loadavg_end"`

	CacheDir          string `json:"cache_dir"`
	CacheFS           string `json:"cache_fs"`       // from /proc/mounts
	CacheFSMagic      string `json:"cache_fs_magic"` // statfs f_type
	CacheMount        string `json:"cache_mount"`
	CacheMountOptions string `json:"cache_mount_options"`
	CacheDevice       string `json:"cache_device"`
	DeviceRotational  string `json:"device_rotational"` // "0" (SSD or virtual), "1" (spinning), "" unknown
	DeviceScheduler   string `json:"device_scheduler"`
	CacheFreeBytes    int64  `json:"cache_free_bytes"`

	// Params are the suite's own: store kind and round trip, data-set and
	// cache sizes, fsync, hit ratios per tier, how the service ran.
	Params []Param `json:"params"`
}

// Param is one named fact of a suite's environment.
type Param struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Set records a suite parameter, replacing one of the same name.
func (e *Environment) Set(name, format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	for i := range e.Params {
		if e.Params[i].Name == name {
			e.Params[i].Value = v
			return
		}
	}
	e.Params = append(e.Params, Param{name, v})
}

func collectEnvironment(ctx context.Context, suite string, cfg Config) *Environment {
	e := &Environment{
		Date:        time.Now().UTC().Format(time.RFC3339),
		CommandLine: commandLine(cfg.CommandLine),
		Suite:       suite,
		Scale:       string(cfg.Scale),
		Runs:        cfg.Runs,
		GoVersion:   runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Cores:       runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		CacheDir:    cfg.CacheDir,
	}
	e.ChunkdVersion, e.GitCommit, e.GitModified = version(ctx)
	e.CPUModel = cpuModel()
	e.MemTotalBytes = memTotal()
	e.OS = osRelease()
	e.Kernel = uname()
	e.LoadAvgStart = loadAvg()
	m := mountOf(cfg.CacheDir)
	e.CacheFS, e.CacheMount, e.CacheMountOptions, e.CacheDevice = m.fstype, m.point, m.options, m.device
	e.DeviceRotational, e.DeviceScheduler = blockQueue(m.device)
	e.CacheFSMagic, e.CacheFreeBytes = statFS(cfg.CacheDir)
	return e
}

// loadWarning says why the figures are suspect when the 1-minute load
// average at the start was above the number of cores (other work had the
// machine: every figure is slower and noisier than on an idle one), or
// "" when it was not.
func (e *Environment) loadWarning() string {
	f := strings.Fields(e.LoadAvgStart)
	if len(f) == 0 || e.Cores < 1 {
		return ""
	}
	load, err := strconv.ParseFloat(f[0], 64)
	if err != nil || load <= float64(e.Cores) {
		return ""
	}
	return fmt.Sprintf("the 1-minute load average was %s at the start, above the machine's %d cores: "+
		"other work shared them, so every figure is slower and noisier than on an idle machine "+
		"(compare paths within this report only, and see the spread column)", f[0], e.Cores)
}

func (e *Environment) finish(took time.Duration) {
	e.LoadAvgEnd = loadAvg()
	e.Took = took.Round(time.Second).String()
}

// Markdown renders the block as a two-column table.
func (e *Environment) Markdown() string {
	var b strings.Builder
	row := func(k, v string) {
		if v == "" {
			v = "unknown"
		}
		fmt.Fprintf(&b, "| %s | %s |\n", k, strings.ReplaceAll(v, "|", `\|`))
	}
	b.WriteString("| | |\n|---|---|\n")
	row("date", e.Date)
	row("command", "`"+e.CommandLine+"`")
	row("scale, runs", fmt.Sprintf("%s, %d runs per case (took %s)", e.Scale, e.Runs, e.Took))
	commit := e.GitCommit
	if e.GitModified == "yes" {
		commit += " (with uncommitted changes)"
	}
	row("chunkd", e.ChunkdVersion+", commit "+commit)
	row("Go", e.GoVersion)
	row("CPU", fmt.Sprintf("%s, %d cores (GOMAXPROCS %d)", e.CPUModel, e.Cores, e.GOMAXPROCS))
	row("memory", humanize.IBytes(uint64(e.MemTotalBytes)))
	row("OS, kernel", e.OS+"; "+e.Kernel)
	row("load average (1, 5, 15 min)", "start "+e.LoadAvgStart+"; end "+e.LoadAvgEnd)
	dev := e.CacheDevice
	if e.DeviceRotational != "" {
		dev += ", rotational=" + e.DeviceRotational
	}
	if e.DeviceScheduler != "" {
		dev += ", scheduler " + e.DeviceScheduler
	}
	row("cache dir", fmt.Sprintf("`%s` on %s (statfs type %s), mounted at %s from %s; %s free",
		e.CacheDir, e.CacheFS, e.CacheFSMagic, e.CacheMount, dev, humanize.IBytes(uint64(e.CacheFreeBytes))))
	for _, p := range e.Params {
		row(p.Name, p.Value)
	}
	return b.String()
}

// version returns chunkd's version and commit from the build info, or
// from git in the current directory when the binary carries none (go run,
// go test). git is only read: status runs without taking optional locks.
func version(ctx context.Context) (ver, commit, modified string) {
	ver, commit, modified = "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		ver = bi.Main.Path + " " + bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = map[string]string{"true": "yes", "false": "no"}[s.Value]
			}
		}
	}
	if commit != "unknown" {
		return ver, commit, modified
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out)) + " (from git)"
		if st, err := exec.CommandContext(ctx, "git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
			modified = "no"
			if len(strings.TrimSpace(string(st))) > 0 {
				modified = "yes"
			}
		}
	}
	return ver, commit, modified
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10 // kB
			}
		}
	}
	return 0
}

func osRelease() string {
	raw, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

type mount struct{ device, point, fstype, options string }

// mountOf finds the mount holding dir in /proc/mounts: the longest mount
// point that is a prefix of dir's real path.
func mountOf(dir string) mount {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	raw, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return mount{}
	}
	var best mount
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		point := unescapeMount(f[1])
		if point != "/" && real != point && !strings.HasPrefix(real, point+"/") {
			continue
		}
		if len(point) >= len(best.point) {
			best = mount{unescapeMount(f[0]), point, f[2], f[3]}
		}
	}
	return best
}

// unescapeMount undoes /proc/mounts' octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// blockQueue reads the rotational flag and I/O scheduler of a block
// device (of its whole disk, for a partition).
func blockQueue(device string) (rotational, scheduler string) {
	if !strings.HasPrefix(device, "/dev/") {
		return "", ""
	}
	if real, err := filepath.EvalSymlinks(device); err == nil {
		device = real
	}
	dir := filepath.Join("/sys/class/block", filepath.Base(device))
	for _, d := range []string{dir, filepath.Join(dir, "..")} {
		if raw, err := os.ReadFile(filepath.Join(d, "queue", "rotational")); err == nil {
			rotational = strings.TrimSpace(string(raw))
			if s, err := os.ReadFile(filepath.Join(d, "queue", "scheduler")); err == nil {
				scheduler = strings.TrimSpace(string(s))
			}
			return
		}
	}
	return "", ""
}

// commandLine renders the command line, naming a binary that go run
// built in a temporary directory "go run ./cmd/NAME".
func commandLine(args []string) string {
	if len(args) > 0 && strings.Contains(args[0], "go-build") {
		return strings.TrimSpace("go run ./cmd/" + filepath.Base(args[0]) + " " + shellquote.Join(args[1:]))
	}
	return shellquote.Join(args)
}
