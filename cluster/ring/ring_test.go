package ring

import (
	"fmt"
	"math"
	"testing"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("db%d/%032d", i%7, i)
	}
	return out
}

func TestOwnerIsFirstOfOrder(t *testing.T) {
	r := New([]Member{{"a", 1}, {"b", 1}, {"c", 2}})
	for _, k := range keys(1000) {
		o := r.Order(k)
		if len(o) != 3 || o[0] != r.Owner(k) {
			t.Fatalf("%s: order %v, owner %s", k, o, r.Owner(k))
		}
	}
}

func TestSameForAnyMemberOrder(t *testing.T) {
	a := New([]Member{{"a", 1}, {"b", 1}, {"c", 1}})
	b := New([]Member{{"c", 1}, {"a", 1}, {"b", 1}, {"a", 5}})
	for _, k := range keys(1000) {
		if a.Owner(k) != b.Owner(k) {
			t.Fatalf("%s: %s vs %s", k, a.Owner(k), b.Owner(k))
		}
	}
}

// Weights share the files out in proportion, within a few percent over
// 20000 keys.
func TestWeights(t *testing.T) {
	r := New([]Member{{"a", 1}, {"b", 2}, {"c", 1}})
	n := map[string]int{}
	ks := keys(20000)
	for _, k := range ks {
		n[r.Owner(k)]++
	}
	for id, want := range map[string]float64{"a": 0.25, "b": 0.5, "c": 0.25} {
		got := float64(n[id]) / float64(len(ks))
		if math.Abs(got-want) > 0.02 {
			t.Errorf("%s owns %.3f of the keys, want %.2f", id, got, want)
		}
	}
}

// A node joining takes about its share, each key from the node that had
// it; a node leaving gives away only its own keys, each to the next in
// that key's order.
func TestJoinAndLeaveMoveOnlyTheirShare(t *testing.T) {
	three := New([]Member{{"a", 1}, {"b", 1}, {"c", 1}})
	four := New([]Member{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}})
	ks := keys(20000)
	moved := 0
	for _, k := range ks {
		before, after := three.Owner(k), four.Owner(k)
		if before != after {
			moved++
			if after != "d" {
				t.Fatalf("%s moved from %s to %s, not to the new node", k, before, after)
			}
		}
	}
	if f := float64(moved) / float64(len(ks)); math.Abs(f-0.25) > 0.02 {
		t.Errorf("joining moved %.3f of the keys, want about 0.25", f)
	}
	two := New([]Member{{"a", 1}, {"c", 1}})
	for _, k := range ks {
		before, after := three.Owner(k), two.Owner(k)
		if before != "b" && before != after {
			t.Fatalf("%s moved from %s to %s when b left", k, before, after)
		}
		if before == "b" && after != three.Order(k)[1] {
			t.Fatalf("%s went to %s, not to the next in its order %v", k, after, three.Order(k))
		}
	}
}

func TestEmpty(t *testing.T) {
	if o := New(nil).Owner("x"); o != "" {
		t.Fatalf("owner %q in an empty ring", o)
	}
}

// A known answer: the placement is a contract between nodes and clients
// (Version), so it must not change by accident.
func TestKnownPlacement(t *testing.T) {
	r := New([]Member{{"node-0", 1}, {"node-1", 1}, {"node-2", 1}})
	got := ""
	for _, k := range []string{"remote-classic/ksk59qv6p04kqje29kc59n1r1vnjt140", "remote-archive/afhahvjmm5umukvhmg2dvo3ctmsrkg0q.darc", "x/y"} {
		got += r.Owner(k) + " "
	}
	t.Logf("placement: %s", got)
	if want := knownPlacement; got != want {
		t.Fatalf("placement %q, want %q (Version must change with it)", got, want)
	}
}

var knownPlacement = "node-1 node-2 node-0 "
