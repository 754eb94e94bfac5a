//go:build ncruces

package main

import (
	_ "github.com/ncruces/go-sqlite3/driver"
)

const binding, driverName = "ncruces/go-sqlite3 (wasm)", "sqlite3"
