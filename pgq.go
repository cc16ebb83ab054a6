// Package pgq embeds the SQL that makes up pgq: the tern migrations in
// sql/migrations, which freeze the code packages sql/functions and
// sql/triggers. The pgq-scheduler binary and the tests install exactly this.
package pgq

import (
	"embed"
	"io/fs"
)

//go:embed all:sql/migrations
var sqlFiles embed.FS

// Migrations returns the tern migrations directory (001_schema.sql, ...,
// snapshots/) as an fs.FS rooted at sql/migrations.
func Migrations() fs.FS {
	sub, err := fs.Sub(sqlFiles, "sql/migrations")
	if err != nil {
		panic(err) // the path is fixed at compile time
	}
	return sub
}
