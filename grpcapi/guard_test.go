package grpcapi

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/chunkd/chunkd/api/chunkpb"
	"github.com/chunkd/chunkd/auth"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestGuardRuleDecides: whether a call needs a database is its service's
// rule to say, not the message's shape: a service open to any token lets
// a message naming another database through; one that needs the
// database's token reads it from the message; a service of no rule is
// refused to everyone.
func TestGuardRuleDecides(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("right db1\nother db2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{g: &auth.Guard{Tokens: tokens, Logger: slog.New(slog.DiscardHandler)}, rules: map[string]auth.Need{
		"test.Repo":  auth.AnyToken,
		"test.Chunk": auth.DBToken,
	}}
	msg := &chunkpb.GetChunkRequest{Db: "db2"}
	for _, c := range []struct {
		method, token string
		msg           any
		want          codes.Code
	}{
		{"/test.Repo/Get", "right", msg, codes.OK}, // any token: the message's database is not the rule's
		{"/test.Repo/Get", "wr0ng", msg, codes.Unauthenticated},
		{"/test.Chunk/Get", "right", msg, codes.PermissionDenied},
		{"/test.Chunk/Get", "other", msg, codes.OK},
		{"/test.Chunk/Get", "other", &healthpb.HealthCheckRequest{}, codes.PermissionDenied}, // names no database
		{"/test.Unknown/Get", "right", msg, codes.PermissionDenied},                          // no rule
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+c.token))
		if _, err := g.check(ctx, c.method, c.msg); status.Code(err) != c.want {
			t.Errorf("%s with token %s: %v, want %v", c.method, c.token, err, c.want)
		}
	}
}
