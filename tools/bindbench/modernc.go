//go:build modernc

package main

import _ "modernc.org/sqlite"

const binding, driverName = "modernc.org/sqlite (C translated to Go)", "sqlite"
