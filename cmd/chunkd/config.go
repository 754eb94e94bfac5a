package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/chunkd/chunkd/store"
	"go.yaml.in/yaml/v3"
)

// Settings of a long-running command come from four places, the first
// that has one winning: the command line, the environment (CHUNKD_ and the
// flag's name in capitals with _ for -: --cache-dir is CHUNKD_CACHE_DIR),
// a YAML config file (--config FILE or CHUNKD_CONFIG; keys are the flag
// names), and the flag's default.

// envName is the environment variable of flag name.
func envName(name string) string {
	return "CHUNKD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// configFlags are the flags that say where the settings come from; they
// are themselves read only from the command line (and CHUNKD_CONFIG).
var configFlags = map[string]bool{"config": true, "print-config": true}

// otherVariables are the CHUNKD_ variables that are no setting of serve
// but are read elsewhere: by every command, the client, the loadable
// extension, the benchmarks and the tests. serve warns of any other
// CHUNKD_ variable in its environment, which would otherwise be ignored
// silently (a misspelt CHUNKD_CACHEDIR).
var otherVariables = map[string]bool{
	"CHUNKD_TOKEN":              true, // the client's bearer token (sql, status, the extension)
	"CHUNKD_CPUPROFILE":         true, // every command: write a CPU profile
	"CHUNKD_LEAN_HTTP":          true, // the client's HTTP path, for A/B measurements
	"CHUNKD_SERVICE":            true, // the extension: service=
	"CHUNKD_CA":                 true, // the extension: ca=
	"CHUNKD_LOG_LEVEL":          true, // the extension's logging
	"CHUNKD_MINIO":              true, // tests: the MinIO binary
	"CHUNKD_REQUIRE_S3":         true, // tests: fail rather than skip without MinIO
	"CHUNKD_REQUIRE_CHROMIUM":   true, // tests: fail rather than skip without Chromium
	"CHUNKD_DOLT":               true, // tests: the dolt binary
	"CHUNKD_SOAK":               true, // tests: the soak's length
	"CHUNKD_BENCH_SENTENCES":    true, // benchmarks' data size
	"CHUNKD_BENCH_BARE_SERVER":  true, // benchmarks: a bare server to compare with
	"CHUNKD_KILLED_WRITER":      true, // tests: the process is a writer a test kills
	"CHUNKD_FOLDER_TEST_WRITER": true, // tests: likewise, for the folder store
	"CHUNKD_FAILPOINT":          true, // tests: where chunkd gc stops (TestGCCrash)
	"CHUNKD_BANK":               true, // tests: the process is a bank workload's writer or reader
}

// layered records where each flag's value came from.
type layered struct {
	file   string            // the config file, "" without one
	source map[string]string // flag name: "flag", "env NAME", "file", "default"
	unused []string          // CHUNKD_ variables that set nothing (unusedVariables)
}

// applyLayers fills every flag of fs not given on the command line from
// the environment, then from the config file.
func applyLayers(fs *flag.FlagSet, configFile string) (*layered, error) {
	l := &layered{file: configFile, source: map[string]string{}}
	fs.Visit(func(f *flag.Flag) { l.source[f.Name] = "flag" })
	if l.file == "" {
		l.file = os.Getenv("CHUNKD_CONFIG")
	}
	fileValues := map[string]string{}
	if l.file != "" {
		var err error
		if fileValues, err = readConfigFile(fs, l.file); err != nil {
			return nil, err
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || configFlags[f.Name] || l.source[f.Name] == "flag" {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("%s=%q: %v", envName(f.Name), v, e)
				return
			}
			l.source[f.Name] = "env " + envName(f.Name)
			return
		}
		if v, ok := fileValues[f.Name]; ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("config file %s: %s: %q: %v", l.file, f.Name, v, e)
				return
			}
			l.source[f.Name] = "file"
			return
		}
		l.source[f.Name] = "default"
	})
	l.unused = unusedVariables(fs)
	return l, err
}

// unusedVariables lists the CHUNKD_ variables of the environment that
// set nothing: they name no flag of fs that the environment may set, nor
// one of otherVariables. Each is "NAME: why".
func unusedVariables(fs *flag.FlagSet) []string {
	settings := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { settings[envName(f.Name)] = f.Name })
	var unused []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "CHUNKD_") || otherVariables[name] {
			continue
		}
		switch flagName, ok := settings[name]; {
		case !ok:
			unused = append(unused, name+": it names no setting (a setting's variable is CHUNKD_ and its flag's name in capitals, - as _)")
		case configFlags[flagName] && flagName != "config":
			unused = append(unused, name+": --"+flagName+" is read from the command line only")
		}
	}
	sort.Strings(unused)
	return unused
}

// warn logs the CHUNKD_ variables that set nothing.
func (l *layered) warn(log *slog.Logger) {
	for _, u := range l.unused {
		name, why, _ := strings.Cut(u, ": ")
		log.Warn("ignored the environment variable "+name+": "+why, "variable", name)
	}
}

// readConfigFile reads a YAML mapping of flag names to scalar values.
// Keys may use _ for -; a key that is no flag is an error.
func readConfigFile(fs *flag.FlagSet, path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("config file: %v", err)
	}
	var raw map[string]yaml.Node
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, usagef("config file %s: %v", path, err)
	}
	out := map[string]string{}
	for k, node := range raw {
		name := strings.ReplaceAll(k, "_", "-")
		if fs.Lookup(name) == nil || configFlags[name] {
			var known []string
			fs.VisitAll(func(f *flag.Flag) {
				if !configFlags[f.Name] {
					known = append(known, f.Name)
				}
			})
			return nil, usagef("config file %s:%d: unknown setting %q (known: %s)", path, node.Line, k, strings.Join(known, ", "))
		}
		if node.Kind != yaml.ScalarNode {
			return nil, usagef("config file %s:%d: %s: want a single value, not a list or a mapping", path, node.Line, k)
		}
		if node.Tag == "!!null" {
			out[name] = ""
		} else {
			out[name] = node.Value
		}
	}
	return out, nil
}

// print writes every setting and where it came from, as a YAML config
// file (secrets in a store URL redacted).
func (l *layered) print(w io.Writer, fs *flag.FlagSet, command string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# chunkd %s: each setting and where it came from (flag > env > file > default)\n", command)
	if l.file != "" {
		fmt.Fprintf(&b, "# config file: %s\n", l.file)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if !configFlags[f.Name] {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	width := 0
	lines := make([]string, len(names))
	for i, n := range names {
		v := fs.Lookup(n).Value.String()
		if n == "store" {
			v = store.Redact(v)
		}
		enc, err := yaml.Marshal(map[string]string{n: v})
		if err != nil {
			return err
		}
		lines[i] = strings.TrimSuffix(string(enc), "\n")
		width = max(width, len(lines[i]))
	}
	for i, n := range names {
		fmt.Fprintf(&b, "%-*s  # %s\n", width, lines[i], l.source[n])
	}
	_, err := w.Write(b.Bytes())
	return err
}

// warnURLSecrets warns when a --store URL given on the command line holds
// a secret, which every user of the machine can read in ps.
func warnURLSecrets(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "store" {
			return
		}
		if names := store.Secrets(f.Value.String()); len(names) > 0 {
			slog.Warn("the --store URL on the command line holds a secret ("+strings.Join(names, ", ")+"), which other users can read in ps; "+
				"give S3 credentials as AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a shared credentials file (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE) or an IAM role, "+
				"or put the URL in CHUNKD_STORE or serve's config file", "store", store.Redact(f.Value.String()))
		}
	})
}
