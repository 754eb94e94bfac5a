// Package ring places table files on the nodes of a chunkd cluster by
// weighted rendezvous hashing (highest random weight): every node scores
// every file, score = weight / -ln(h), h a hash of the node's id and the
// file's store key mapped into (0, 1), and the node with the highest score
// owns the file; the others, in falling score, are where its reads go when
// the owner is down.
//
// Nodes and clients compute the same placement from the same members (ids
// and weights, as GET /v1/cluster gives them), with no coordination: a file
// moves only when its owner leaves or a node that outscores it joins, so a
// node joining takes about weight/total of the files, each from the node
// that had it, and a node leaving gives away only its own.
//
// The package imports nothing of chunkd, so a client links it without the
// cluster's membership.
package ring

import (
	"math"
	"sort"

	"github.com/zeebo/xxh3"
)

// Version names the placement; it is part of GET /v1/cluster, so a client
// that computes another one knows not to route by it.
const Version = "rendezvous-xxh3-v1"

// Member is one node as the placement sees it.
type Member struct {
	ID     string  // stable across restarts (--node-id)
	Weight float64 // relative share of files (a node's --disk); <= 0 counts as 1
}

// Ring is a placement over a set of members. It is immutable.
type Ring struct {
	members []Member
	seeds   []uint64 // the hash of each member's id, the seed of its scores
}

// New returns the placement over members (their order does not matter;
// a duplicate id keeps its first entry).
func New(members []Member) *Ring {
	seen := make(map[string]bool, len(members))
	r := &Ring{}
	for _, m := range members {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		if m.Weight <= 0 || math.IsNaN(m.Weight) || math.IsInf(m.Weight, 0) {
			m.Weight = 1
		}
		r.members = append(r.members, m)
	}
	sort.Slice(r.members, func(i, j int) bool { return r.members[i].ID < r.members[j].ID })
	r.seeds = make([]uint64, len(r.members))
	for i, m := range r.members {
		r.seeds[i] = xxh3.HashString(m.ID)
	}
	return r
}

// Len is the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Members returns the members, sorted by id.
func (r *Ring) Members() []Member { return append([]Member(nil), r.members...) }

// score is member i's score for key.
func (r *Ring) score(i int, key string) float64 {
	h := xxh3.HashStringSeed(key, r.seeds[i])
	// 53 random bits mapped into (0, 1): never 0, so -ln(u) > 0.
	u := (float64(h>>11) + 0.5) / (1 << 53)
	return r.members[i].Weight / -math.Log(u)
}

// Owner returns the id of the member that owns key ("" for an empty ring).
func (r *Ring) Owner(key string) string {
	best, bestScore := -1, -1.0
	for i := range r.members {
		if s := r.score(i, key); s > bestScore || (s == bestScore && r.members[i].ID < r.members[best].ID) {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return ""
	}
	return r.members[best].ID
}

// Order returns every member's id in the order key's reads try them: the
// owner first, then the next by score.
func (r *Ring) Order(key string) []string {
	type scored struct {
		id string
		s  float64
	}
	all := make([]scored, len(r.members))
	for i, m := range r.members {
		all[i] = scored{m.ID, r.score(i, key)}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].s != all[j].s {
			return all[i].s > all[j].s
		}
		return all[i].id < all[j].id
	})
	out := make([]string, len(all))
	for i, s := range all {
		out[i] = s.id
	}
	return out
}
