package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueueRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.createTopic(t, b.Pool, "orders.tasks")
	id := b.publish(t, b.Pool, "orders.tasks", `{"order":1}`)
	ms := b.read(t, b.Pool, "orders.tasks", nil, "w1", 10, "30 seconds")
	require.Len(t, ms, 1)
	require.Equal(t, id, ms[0].MessageID)
	require.Equal(t, int32(1), ms[0].Attempt)
	require.Equal(t, 1, b.ack(t, b.Pool, ms[0].LeaseID, nil))
	require.Equal(t, 0, b.ack(t, b.Pool, ms[0].LeaseID, nil), "ack is idempotent")
	require.Empty(t, b.read(t, b.Pool, "orders.tasks", nil, "w1", 10, "30 seconds"))
}
