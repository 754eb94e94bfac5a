package service_test

import (
	"log/slog"
	"testing"

	"github.com/chunkd/chunkd/service"
)

// quiet logs nothing.
var quiet = slog.New(slog.DiscardHandler)

// start starts a service with cfg, quiet unless cfg has a logger, closed
// when the test ends.
func start(t testing.TB, cfg service.Config) *service.Service {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	svc, err := service.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}
