package pgq

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the pgq version of this source tree, from its VERSION file:
// a release ("0.1.0") or the release being prepared ("0.1.0-dev"). The SQL
// it installs reports the same through fanout.version().
func Version() string { return strings.TrimSpace(versionFile) }
