// Package console is the cache service's web console: a page at / that
// lists the databases and their versions, each table with its schema and
// row count, and runs SQL through the query API (package sqlserve),
// showing the rows a page at a time (NULL as NULL), the time taken and
// whether the result cache answered, with CSV and JSON downloads. The
// URL carries the database, the version and the query
// (/?db=NAME&at=ROOT&sql=…), so a link shows the same result to someone
// else. With tokens, the page asks for one and keeps it in the tab's
// sessionStorage.
//
// Its files (assets/) are embedded in the binary: it loads nothing from
// anywhere but the service, and works with no internet. The page holds
// no data: it reads everything through the API with the visitor's token,
// so its routes need none.
package console

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/chunkd/chunkd/auth"
	"github.com/chunkd/chunkd/httpapi"
)

//go:embed assets
var assets embed.FS

// Routes are the console's routes on the HTTP API: the page at / and its
// files under /console/.
func Routes() []httpapi.Route {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree has the folder
	}
	page, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic(err)
	}
	static := http.StripPrefix("/console/", http.FileServerFS(files))
	return []httpapi.Route{
		{Pattern: "GET /{$}", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secure(w.Header())
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(page)
		}), Need: auth.Open, Metric: "http_console"},
		{Pattern: "GET /console/", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secure(w.Header())
			w.Header().Set("Cache-Control", "no-cache")
			static.ServeHTTP(w, r)
		}), Need: auth.Open, Metric: "http_console"},
	}
}

// secure sets the headers that keep the page to itself: scripts, styles
// and requests only from the service, and no framing.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}
