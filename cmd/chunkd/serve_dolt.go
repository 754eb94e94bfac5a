package main

import "flag"

// doltFlags are serve's flags of the Dolt remote.
type doltFlags struct {
	on     *bool
	listen *string
}

// The flag is --dolt-remote, not --dolt: every flag is also read from
// CHUNKD_<NAME>, and CHUNKD_DOLT names the dolt binary of the tests.
func addDoltFlags(fs *flag.FlagSet) doltFlags {
	return doltFlags{
		on:     fs.Bool("dolt-remote", true, "serve every Dolt database in the store as a read-only Dolt remote (dolt clone http://HOST:PORT/ORG/REPO, PORT the gRPC listener's)"),
		listen: fs.String("dolt-listen", "", "gRPC address for the Dolt remote; empty serves it on --grpc-listen (no gRPC listener at all: no Dolt remote)"),
	}
}

// validate checks the flags.
func (d doltFlags) validate() error {
	if !*d.on && *d.listen != "" {
		return usagef("--dolt-listen needs --dolt-remote")
	}
	return nil
}
