package pgq

import (
	"embed"
	"io/fs"
)

// The shard directory and the PL/Proxy schema (docs/scaling-out.md): tern
// migrations of their own, installed into the directory database only
// (never into a shard), each with its own version table.
//
//go:embed sql/directory sql/proxy
var shardFiles embed.FS

// DirectoryMigrations returns the migrations of schema fanout_directory
// (sql/directory).
func DirectoryMigrations() fs.FS { return sub(shardFiles, "sql/directory") }

// ProxyMigrations returns the migrations of schema fanout_proxy (sql/proxy),
// which need the directory and PL/Proxy.
func ProxyMigrations() fs.FS { return sub(shardFiles, "sql/proxy") }

func sub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the paths are fixed at compile time
	}
	return s
}
