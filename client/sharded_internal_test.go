package client

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The client's placement match is fanout_directory.shard_for's: the exact
// name, then the longest matching prefix, then '%'; nothing without a
// default.
func TestShardedPlacementMatch(t *testing.T) {
	var d directorySnapshot
	require.NoError(t, json.Unmarshal([]byte(`{"version": 3, "shards": {}, "placements": {
		"acme.%": "a", "acme.eu.%": "e", "acme.eu.audit": "x", "audit": "y", "glob%": "g"}}`), &d))
	d.index()
	for topic, want := range map[string]string{
		"acme.orders": "a", "acme.eu.orders": "e", "acme.eu.audit": "x", "acme.eu.audit.2": "e",
		"audit": "y", "globex.x": "g", "glob": "g", "acme": "",
	} {
		got, ok := d.shardFor(topic)
		require.Equal(t, want != "", ok, topic)
		require.Equal(t, want, got, topic)
	}
	d.Placements["%"] = "default"
	d.index()
	got, ok := d.shardFor("acme")
	require.True(t, ok)
	require.Equal(t, "default", got)
}
