package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestKubernetesCluster decodes deploy/kubernetes/chunkd-cluster.yaml with
// the Kubernetes API's own types, strictly (a misspelt field fails), and
// checks that its parts fit: the StatefulSet's headless Service lists
// every pod, ready or not (--peers-dns names it); the cache directory is
// each pod's own volume; readiness is /readyz; and the container's
// arguments are flags chunk serve takes.
func TestKubernetesCluster(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/kubernetes/chunkd-cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var services []corev1.Service
	var sets []appsv1.StatefulSet
	for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(string(raw), -1) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "Service":
			var s corev1.Service
			if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
				t.Fatalf("Service: %v", err)
			}
			services = append(services, s)
		case "StatefulSet":
			var s appsv1.StatefulSet
			if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
				t.Fatalf("StatefulSet: %v", err)
			}
			sets = append(sets, s)
		default:
			t.Fatalf("unexpected kind %q", head.Kind)
		}
	}
	if len(sets) != 1 {
		t.Fatalf("%d StatefulSets, want 1", len(sets))
	}
	ss := sets[0]
	var headless *corev1.Service
	for i, s := range services {
		if s.Name == ss.Spec.ServiceName {
			headless = &services[i]
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("the StatefulSet's service %q must be headless (clusterIP None) and list pods before they are ready", ss.Spec.ServiceName)
	}
	labels := ss.Spec.Template.Labels
	for _, s := range services {
		for k, v := range s.Spec.Selector {
			if labels[k] != v {
				t.Errorf("Service %s selects %s=%s, which the pods do not carry", s.Name, k, v)
			}
		}
	}
	for k, v := range ss.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("the StatefulSet selects %s=%s, which its pods do not carry", k, v)
		}
	}
	if ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("pods should start in parallel, not wait for each other")
	}
	c := ss.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness must be GET /readyz")
	}
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = v
	}
	if !strings.HasPrefix(flags["peers-dns"], headless.Name+".") {
		t.Errorf("--peers-dns %q does not name the headless Service %s", flags["peers-dns"], headless.Name)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == flags["cache-dir"] {
			for _, v := range ss.Spec.VolumeClaimTemplates {
				mounted = mounted || v.Name == m.Name
			}
		}
	}
	if !mounted {
		t.Errorf("--cache-dir %s is not a volume of each pod's own (volumeClaimTemplates)", flags["cache-dir"])
	}
	// The arguments, with the pod's variables filled in, are serve's.
	vars := strings.NewReplacer("$(POD_NAME)", "chunkd-0", "$(POD_IP)", "10.0.0.7", "$(POD_NAMESPACE)", "default")
	args := []string{}
	for _, a := range c.Args {
		args = append(args, vars.Replace(a))
	}
	var out bytes.Buffer
	cmd := exec.Command(binary, append(args, "--print-config")...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("chunkd %s --print-config: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	if !strings.Contains(out.String(), "chunkd-peers.default.svc.cluster.local:9460") {
		t.Fatalf("--print-config does not show --peers-dns:\n%s", out.String())
	}
}
