package store_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/chunkd/chunkd/store"
	"github.com/chunkd/chunkd/store/folder"
)

func TestOpenerOf(t *testing.T) {
	u, _ := url.Parse("file:///nowhere")
	fail := errors.New("cannot open")
	open := store.OpenerOf(func(context.Context, *url.URL) (*folder.Store, error) { return nil, fail })
	if s, err := open(context.Background(), u); s != nil || !errors.Is(err, fail) {
		t.Errorf("failed open = %#v, %v; want a nil Store and the error", s, err)
	}
	dir := t.TempDir()
	u = &url.URL{Scheme: "file", Path: dir}
	s, err := store.OpenerOf(folder.Open)(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*folder.Store); !ok {
		t.Errorf("opened %T, want *folder.Store", s)
	}
}
