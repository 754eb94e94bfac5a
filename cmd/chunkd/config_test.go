package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var configLine = regexp.MustCompile(`^([a-z-]+): (.*?)\s+# (.+)$`)

// printConfig runs serve --print-config and returns each setting's value
// and source.
func printConfig(t *testing.T, env []string, args ...string) (values, sources map[string]string) {
	t.Helper()
	out, errOut, err := chunkdEnv(t, env, append([]string{"serve", "--print-config"}, args...)...)
	if err != nil {
		t.Fatalf("serve --print-config: %v\n%s", err, errOut)
	}
	values, sources = map[string]string{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := configLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("print-config line %q", line)
		}
		values[m[1]], sources[m[1]] = strings.Trim(m[2], `"`), m[3]
	}
	return values, sources
}

// TestServeConfigLayers: every serve flag can come from the environment
// and from the config file, and a flag beats the environment, which beats
// the file, which beats the default.
func TestServeConfigLayers(t *testing.T) {
	defaults, sources := printConfig(t, nil)
	if len(defaults) < 15 {
		t.Fatalf("only %d settings printed", len(defaults))
	}
	var env []string
	var file strings.Builder
	for name, v := range defaults {
		if !strings.HasPrefix(sources[name], "default") {
			t.Errorf("%s: source %q with nothing set", name, sources[name])
		}
		env = append(env, envName(name)+"="+v)
		fmt.Fprintf(&file, "%s: %q\n", strings.ReplaceAll(name, "-", "_"), v)
	}
	_, fromEnv := printConfig(t, env)
	cfg := filepath.Join(t.TempDir(), "chunkd.yaml")
	if err := os.WriteFile(cfg, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	_, fromFile := printConfig(t, nil, "--config", cfg)
	for name := range defaults {
		if fromEnv[name] != "env "+envName(name) {
			t.Errorf("%s from %s: source %q", name, envName(name), fromEnv[name])
		}
		if fromFile[name] != "file" {
			t.Errorf("%s from the file: source %q", name, fromFile[name])
		}
	}

	// Precedence, one setting at each layer.
	if err := os.WriteFile(cfg, []byte("mem: 64MiB\ndisk: 2GiB\ndownloads: 5\nstore: /from/file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	values, sources := printConfig(t, []string{"CHUNKD_DISK=3GiB", "CHUNKD_DOWNLOADS=6", "CHUNKD_CONFIG=" + cfg}, "--downloads", "7")
	for name, want := range map[string][2]string{
		"mem":       {"64 MiB", "file"},
		"disk":      {"3.0 GiB", "env CHUNKD_DISK"},
		"downloads": {"7", "flag"},
		"store":     {"/from/file", "file"},
		"listen":    {"127.0.0.1:9460", "default"},
	} {
		if values[name] != want[0] || sources[name] != want[1] {
			t.Errorf("%s = %q from %q, want %q from %q", name, values[name], sources[name], want[0], want[1])
		}
	}
}

func TestServeConfigErrors(t *testing.T) {
	dir := t.TempDir()
	n := 0
	write := func(text string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", n))
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--config", write("mem: 1GiB\ncache-dri: /x\n")}, `c1.yaml:2: unknown setting "cache-dri"`},
		{nil, []string{"--config", write("listen: [a, b]\n")}, "listen: want a single value"},
		{nil, []string{"--config", write("mem: lots\n")}, `config file ` + dir + `/c3.yaml: mem: "lots": want a number with a unit`},
		{[]string{"CHUNKD_DOWNLOADS=many"}, nil, `CHUNKD_DOWNLOADS="many"`},
		{nil, []string{"--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml: no such file"},
	} {
		// Every config error exits 2, as a bad flag does.
		_, errOut, err := chunkdEnv(t, tc.env, append([]string{"serve", "--print-config"}, tc.args...)...)
		if exitCode(t, err) != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v %v: %v %q, want exit status 2 and an error with %q", tc.env, tc.args, err, errOut, tc.want)
		}
	}
}

// TestServeUnusedVariables: a CHUNKD_ variable that sets nothing is
// warned about (as an unknown key of the config file is refused), not
// ignored in silence; one that other parts of chunkd read is not.
func TestServeUnusedVariables(t *testing.T) {
	_, errOut, err := chunkdEnv(t, []string{"CHUNKD_CACHEDIR=/x", "CHUNKD_PRINT_CONFIG=true", "CHUNKD_TOKEN=t", "CHUNKD_MEM=1GiB"}, "serve", "--print-config")
	if err != nil {
		t.Fatal(err, errOut)
	}
	for _, want := range []string{
		"ignored the environment variable CHUNKD_CACHEDIR: it names no setting",
		"ignored the environment variable CHUNKD_PRINT_CONFIG: --print-config is read from the command line only",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("no warning %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "variable CHUNKD_TOKEN") || strings.Contains(errOut, "variable CHUNKD_MEM") {
		t.Errorf("a warning about a variable in use:\n%s", errOut)
	}
}

// TestKnownVariables: every CHUNKD_ variable the project's code, scripts
// and docs name is a setting of serve or one of otherVariables, so that
// serve warns of none of them.
func TestKnownVariables(t *testing.T) {
	settings := map[string]bool{"CHUNKD_CONFIG": true}
	values, _ := printConfig(t, nil)
	for name := range values {
		settings[envName(name)] = true
	}
	wrong := map[string]bool{"CHUNKD_CACHEDIR": true, "CHUNKD_PRINT_CONFIG": true} // the wrong ones of TestServeUnusedVariables
	name := regexp.MustCompile(`CHUNKD_[A-Z][A-Z0-9_]*[A-Z0-9]`)
	found := 0
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !slices.Contains([]string{".go", ".md", ".sh", ".c", ".yaml", ".service", ""}, filepath.Ext(path)) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return nil // a binary built here (chunkd, a script's output): not source
		}
		for _, v := range name.FindAllString(string(b), -1) {
			if strings.HasPrefix(v, "CHUNKD_SQLITE") || wrong[v] { // C macros of the VFS shim, the manifest's format name
				continue
			}
			found++
			if !settings[v] && !otherVariables[v] {
				t.Errorf("%s names %s, which serve would warn of: add it to otherVariables (config.go)", path, v)
			}
		}
		return nil
	})
	if err != nil || found < 20 {
		t.Fatalf("%d names found: %v", found, err)
	}
}

// TestPrintConfigImages: --print-config prints the value of --images in
// force, half of --disk by default, not 0.
func TestPrintConfigImages(t *testing.T) {
	values, sources := printConfig(t, nil, "--disk", "8GiB")
	if values["images"] != "4.0 GiB" || sources["images"] != "default (half of --disk)" {
		t.Errorf("images: %q from %q", values["images"], sources["images"])
	}
	values, sources = printConfig(t, []string{"CHUNKD_IMAGES=1GiB"})
	if values["images"] != "1.0 GiB" || sources["images"] != "env CHUNKD_IMAGES" {
		t.Errorf("images: %q from %q", values["images"], sources["images"])
	}
}

// TestStoreSecretWarning: a secret in a --store URL on the command line
// is warned about; the same URL from the environment is not.
func TestStoreSecretWarning(t *testing.T) {
	url := "s3://bucket/p?endpoint=http://127.0.0.1:1&access_key=ak&secret_key=hunter2"
	_, errOut, _ := chunkd(t, "serve", "--print-config", "--store", url)
	if !strings.Contains(errOut, "holds a secret (secret_key)") || strings.Contains(errOut, "hunter2") {
		t.Fatalf("secret on the command line: %q", errOut)
	}
	out, errOut, err := chunkdEnv(t, []string{"CHUNKD_STORE=" + url}, "serve", "--print-config")
	if err != nil || strings.Contains(errOut, "holds a secret") {
		t.Fatalf("secret from the environment: %v %q", err, errOut)
	}
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "secret_key=xxxxx") {
		t.Fatalf("print-config shows the secret: %s", out)
	}
}

// TestServeZeroSizes: zero sizes and durations are refused, as
// docs/service.md says (in Go a zero cache.Config field is the default;
// on the command line zero is no "off").
func TestServeZeroSizes(t *testing.T) {
	for _, args := range [][]string{{"--mem", "0"}, {"--disk", "0"}, {"--store-timeout", "0s"}, {"--manifest-ttl", "0s"}, {"--client-timeout", "0s"}} {
		_, errOut, err := chunkd(t, append([]string{"serve", "--store", t.TempDir(), "--cache-dir", t.TempDir()}, args...)...)
		if exitCode(t, err) != 2 || !strings.Contains(errOut, "must be positive") {
			t.Errorf("%v: %v %q", args, err, errOut)
		}
	}
	_, errOut, _ := chunkdEnv(t, []string{"CHUNKD_MEM=0"}, "serve", "--store", t.TempDir(), "--cache-dir", t.TempDir())
	if !strings.Contains(errOut, "must be positive") {
		t.Errorf("CHUNKD_MEM=0: %q", errOut)
	}
}
