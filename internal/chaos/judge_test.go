package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The verifier must find every kind of bug it claims to count, and let the
// allowed redeliveries through: one of each, in one synthetic run.
func TestJudgeClassifies(t *testing.T) {
	t.Parallel()
	rs := &records{txns: map[string]*txnRec{
		"a": {topic: "t", n: 3, outcome: 'C'}, // delivered
		"b": {topic: "t", n: 1, outcome: 'R'}, // rolled back, yet delivered
		"c": {topic: "t", n: 1, outcome: 'U'}, // unknown, in the ledger: committed
		"d": {topic: "t", n: 1, outcome: 'U'}, // unknown, not in the ledger: rolled back
		"e": {topic: "t", n: 1, outcome: 'C'}, // COMMIT returned OK, not in the ledger: lost commit
		"f": {topic: "t", n: 1, outcome: 'C'}, // committed, never delivered: missing
	}, acks: map[int64]string{18: "ok", 10: "PGQ11"}}
	ledger := map[string]bool{"a": true, "c": true, "f": true}
	d := func(id int64, key string, attempt int, lease int64) delivery {
		return delivery{group: "g", topic: "t", msgID: id, key: key, attempt: attempt, leaseID: lease, consumer: "x"}
	}
	rs.deliveries = []delivery{
		d(1, "a.0", 1, 10), d(1, "a.0", 2, 11), // allowed: lease 10 expired unsettled
		d(2, "a.1", 1, 10), d(2, "a.1", 2, 12), // lease 10 had settled message 2: redelivery after ack
		d(4, "b.0", 1, 13),                     // rolled back, delivered
		d(5, "c.0", 1, 14), d(5, "c.0", 3, 15), // attempt jumps from 1 to 3
		d(7, "a.2", 1, 16), d(7, "a.2", 2, 17), // lease 17 taken while lease 16 was live
		d(9, "a.2", 1, 99), // no such lease on the server
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(id int64, at time.Duration, msgs []int64, attempts []int32, settled ...int64) *leaseRow {
		return &leaseRow{id: id, group: "t/g", created: t0.Add(at), expires: t0.Add(at + 3*time.Second),
			msgs: msgs, attempts: attempts, settled: settled}
	}
	leases := map[int64]*leaseRow{
		10: lease(10, 0, []int64{1, 2}, []int32{1, 1}, 2),
		11: lease(11, 4*time.Second, []int64{1}, []int32{2}),
		12: lease(12, 4*time.Second, []int64{2}, []int32{2}),
		13: lease(13, 0, []int64{4}, []int32{1}),
		14: lease(14, 0, []int64{5}, []int32{1}),
		15: lease(15, 4*time.Second, []int64{5}, []int32{3}),
		16: lease(16, 0, []int64{7}, []int32{1}),
		17: lease(17, time.Second, []int64{7}, []int32{2}),
		18: lease(18, 0, []int64{8}, []int32{1}), // ack reported OK, nothing settled
	}
	topics := []topicSpec{{name: "t", groups: []groupSpec{{name: "g"}}}}
	v := judge(rs, ledger, leases, topics)
	require.Len(t, v.Groups, 1)
	require.Equal(t, groupResult{Topic: "t", Group: "g", Committed: 6, Delivered: 4, Missing: 1, RolledBack: 1,
		Redelivered: 4, Allowed: 1, AfterAck: 1, LiveLeases: 1, BadAttempt: 1, AckNotSettled: 1, Phantom: 1,
		LostCommit: 1}, *v.Groups[0])
	require.Equal(t, 1, v.Txns.CommitLost)
	require.Equal(t, 1, v.Txns.UnknownCommitted)
	require.Equal(t, 1, v.Txns.UnknownRolledBack)
	lost, bad, rolled := v.totals()
	require.Equal(t, [3]int{2, 5, 1}, [3]int{lost, bad, rolled})

	v.AsyncFailover = true // lost commits and phantoms are the loss window, not bugs
	lost, bad, rolled = v.totals()
	require.Equal(t, [3]int{1, 4, 1}, [3]int{lost, bad, rolled})
}
