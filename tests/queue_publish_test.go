package tests

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// publish and publish_batch store payload, headers and message_group as given;
// publish_batch returns the ids in input order; published_at is the publish
// time; read hands everything back unchanged.
func TestQueuePublishRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	topic := "roundtrip"
	b.createTopic(t, b.Pool, topic)

	var single int64
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT fanout.publish($1, '{"k":"v","n":[1,2]}', '{"trace":"abc"}', 'customer-7')`, topic).Scan(&single))

	const n = 50
	payloads := make([]string, n)
	headers := make([]string, n)
	groups := make([]*string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprintf(`{"i":%d}`, i)
		headers[i] = fmt.Sprintf(`{"h":%d}`, i)
		if i%3 != 0 {
			groups[i] = ptr(fmt.Sprintf("g%d", i%5))
		}
	}
	rows, err := b.Pool.Query(b.ctx, "SELECT * FROM fanout.publish_batch($1, $2::jsonb[], $3::jsonb[], $4::text[])",
		topic, payloads, headers, groups)
	require.NoError(t, err)
	var batch []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		batch = append(batch, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, batch, n)
	for i := 1; i < n; i++ {
		require.Less(t, batch[i-1], batch[i], "ids in input order")
	}

	ms := b.read(t, b.Pool, topic, nil, "c", 1000, "1 minute")
	require.Len(t, ms, n+1)
	require.Equal(t, single, ms[0].MessageID)
	require.JSONEq(t, `{"k":"v","n":[1,2]}`, string(ms[0].Payload))
	require.JSONEq(t, `{"trace":"abc"}`, string(ms[0].Headers))
	require.Equal(t, "customer-7", *ms[0].Group)
	require.False(t, ms[0].Published.IsZero())
	require.False(t, ms[1].Published.Before(ms[0].Published), "published_at follows publish order")
	byID := map[int64]msg{}
	for _, m := range ms[1:] {
		byID[m.MessageID] = m
	}
	for i, id := range batch {
		m, ok := byID[id]
		require.True(t, ok)
		var p struct{ I int }
		require.NoError(t, json.Unmarshal(m.Payload, &p))
		require.Equal(t, i, p.I, "each id carries its own element")
		require.JSONEq(t, headers[i], string(m.Headers))
		require.Equal(t, groups[i], m.Group)
	}
	require.Equal(t, n+1, b.ack(t, b.Pool, ms[0].LeaseID, nil))

	// Headers default to {}; an empty batch publishes nothing.
	id := b.publish(t, b.Pool, topic, `[1,"two",null]`)
	var count int
	require.NoError(t, b.Pool.QueryRow(b.ctx, "SELECT count(*) FROM fanout.publish_batch($1, '{}'::jsonb[])", topic).Scan(&count))
	require.Zero(t, count)
	ms = b.read(t, b.Pool, topic, nil, "c", 10, "1 minute")
	require.Equal(t, []int64{id}, ids(ms))
	require.JSONEq(t, `[1,"two",null]`, string(ms[0].Payload), "any JSON value is a payload")
	require.JSONEq(t, `{}`, string(ms[0].Headers))
	require.Nil(t, ms[0].Group)
}
