package orchestrator

import (
	"fmt"
	"net"
	"net/http"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Bounds of what the console's API returns, so that no row a tenant or a
// client wrote can blow up a response (one 4 MB event_log detail made every
// /api/overview 4 MB, fetched every 5 s by each open page).
const (
	// MaxConsoleEventDetail is the most bytes of an event's detail (as JSON
	// text) the API returns; a larger one is replaced by
	// {"truncated": true, "bytes": N, "preview": "<the first bytes>"}.
	MaxConsoleEventDetail = 2048
	// MaxConsoleErrorText is the most characters of an error text (a dead
	// letter's last_error, a job's last error) the API returns.
	MaxConsoleErrorText = 1000
	// maxConsoleName is the longest topic or group name a query parameter
	// may carry (pgq's limit, in Unicode NFC).
	maxConsoleName = 512
)

// nameParam reads a topic or group name from the query string: valid
// UTF-8, no control characters (NUL included), at most 512 characters in
// NFC. A bad one is the client's mistake (400), never the database's.
func nameParam(r *http.Request, key string) (string, error) {
	s := r.URL.Query().Get(key)
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%s is not valid UTF-8", key)
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return "", fmt.Errorf("%s must not contain control characters (got U+%04X)", key, c)
		}
	}
	if utf8.RuneCountInString(s) > 4*maxConsoleName { // NFC composes at most 4 into 1
		return "", fmt.Errorf("%s is longer than %d characters", key, maxConsoleName)
	}
	s = norm.NFC.String(s)
	if n := utf8.RuneCountInString(s); n > maxConsoleName {
		return "", fmt.Errorf("%s is %d characters long; the limit is %d", key, n, maxConsoleName)
	}
	return s, nil
}

// clipText cuts s to at most n characters, saying so.
func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + fmt.Sprintf(" … (%d characters)", len(r))
	}
	return s
}

// beyondLoopback reports whether a listen address may accept connections
// from other hosts: all interfaces (":9187", "0.0.0.0:..", "[::]:.."), a
// non-loopback address or a host name other than localhost, and also an
// address that cannot be parsed or is not known ("").
func beyondLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
