package api

// The cluster's routes (package cluster), shared by its nodes and the
// clients that route reads by its placement (package cluster/ring).
const (
	// PatternCluster is the route of GET the cluster as a node sees it
	// (ClusterInfo).
	PatternCluster = "GET /v1/cluster"
	// ClusterPath is its path.
	ClusterPath = "/v1/cluster"
	// PatternClusterFiles is the route of GET a database's table files as
	// a router sees them (a RouteTable stream: see cluster.WriteRoutes).
	PatternClusterFiles = "GET /v1/cluster/dbs/{db}/files"
)

// ClusterFilesPath returns the path of database db's routing table.
func ClusterFilesPath(db string) string { return "/v1/cluster/dbs/" + escapeDB(db) + "/files" }

// HeaderCluster is the response header by which a node of a cluster
// says so, on every answer of its HTTP API: its value is the placement
// (ring.Version). A client that sees it learns the members and routes its
// reads (package client); a service alone never sends it.
const HeaderCluster = "Chunkd-Cluster"

// The states of a ClusterMember.
const (
	MemberUp   = "up"   // answering; in the placement
	MemberDown = "down" // not answering; its files are placed on the others
	// MemberUnknown: listed (--peers, DNS) but never answered yet, so
	// its id and weight are not known and it is not in the placement.
	MemberUnknown = "unknown"
)

// ClusterInfo is the answer of GET /v1/cluster: the members, as the node
// asked sees them, and the placement that places files on those up.
type ClusterInfo struct {
	// Self is the id of the node that answered.
	Self string `json:"self"`
	// Placement names the hash (ring.Version): a client that computes
	// another one must not route by it.
	Placement string          `json:"placement"`
	Members   []ClusterMember `json:"members"`
}

// ClusterMember is one node of a ClusterInfo.
type ClusterMember struct {
	ID     string `json:"id"`
	URL    string `json:"url"`            // its HTTP API
	GRPC   string `json:"grpc,omitempty"` // its gRPC address, if it serves one
	Weight int64  `json:"weight"`         // its share of the files: its disk budget, bytes
	State  string `json:"state"`          // MemberUp, MemberDown or MemberUnknown
	// Source says how the node asked learned of it: "self", "static"
	// (--peers), "dns" (--peers-dns), "gossip" (--join), "hello" (it
	// introduced itself).
	Source string `json:"source"`
	// LastSeenMS is how long ago it last answered, in milliseconds (-1:
	// never).
	LastSeenMS int64  `json:"last_seen_ms"`
	Error      string `json:"error,omitempty"` // why it is down
}

// RouteTable is the answer of GET /v1/cluster/dbs/{db}/files: a
// database's table files as a client routing reads by the placement needs
// them, in the order a chunk is looked for.
type RouteTable struct {
	Root  string      `json:"root"`
	Files []RouteFile `json:"files"`
}

// RouteFile is one table file of a RouteTable.
type RouteFile struct {
	Name string `json:"name"`
	Key  string `json:"key"` // its store key, which the placement hashes
	Size int64  `json:"size"`
	// Prefixes holds the first 8 bytes of the address of each of its
	// chunks, sorted, one after another (base64 in JSON): enough to tell
	// which file holds a chunk. A wrong answer costs a hop, never a wrong
	// byte: every chunk is proven against its address.
	Prefixes []byte `json:"prefixes"`
}
