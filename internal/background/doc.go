// Package background runs work at the lowest CPU priority, so that it
// yields the cores to the work it would slow down: chunkd publish's rounds
// beside the application whose database they read, and the cache's proof
// of a download's blocks beside the reads it serves.
package background
