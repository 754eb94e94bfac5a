package main

import (
	"flag"
	"os"

	"github.com/chunkd/chunkd/client"
	"github.com/chunkd/chunkd/sqlchunks"
)

// serviceAuthFlags are a client command's flags for a service that
// requires TLS or tokens.
type serviceAuthFlags struct {
	token, caFile, cert, key string
}

func (f *serviceAuthFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.token, "token", "", "bearer token for the service (default $CHUNKD_TOKEN; prefer the variable: a flag shows in ps)")
	fs.StringVar(&f.caFile, "ca-file", "", "CA certificates (PEM) that sign an https:// or grpcs:// service's certificate (default: the system's)")
	fs.StringVar(&f.cert, "client-cert", "", "client certificate (PEM) for a service that requires one")
	fs.StringVar(&f.key, "client-key", "", "the key of --client-cert (PEM)")
}

// apply sets the options' token and TLS files; the token defaults to
// $CHUNKD_TOKEN.
func (f *serviceAuthFlags) apply(o client.Options) client.Options {
	o.Token = f.bearer()
	o.CAFile, o.CertFile, o.KeyFile = f.caFile, f.cert, f.key
	return o
}

// applySource sets a version source's token and TLS files, as apply does
// a client's.
func (f *serviceAuthFlags) applySource(src *sqlchunks.Source) {
	src.Token = f.bearer()
	src.CAFile, src.CertFile, src.KeyFile = f.caFile, f.cert, f.key
}

// bearer is --token, or else $CHUNKD_TOKEN.
func (f *serviceAuthFlags) bearer() string {
	if f.token != "" {
		return f.token
	}
	return os.Getenv("CHUNKD_TOKEN")
}
