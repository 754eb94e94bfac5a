//go:build mattn

package main

import _ "github.com/mattn/go-sqlite3"

const binding, driverName = "mattn/go-sqlite3 (cgo)", "sqlite3"
