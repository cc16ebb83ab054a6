package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// The checks of the newer kinds must find each kind of violation, one of
// each in one synthetic run, and let retried publishes (a sequence or a
// dedupe key published again after an unknown outcome) through as one
// message: per-key order (key partitions) and per-aggregate order
// (sequences) of first deliveries, a sequence delivered before its
// predecessor's ack was sent, a delayed message delivered before it was due,
// a dedupe key or sequence that became two messages, and a higher priority
// after a lower one (in one page, or in one consumer's later page) although
// it committed before the lower one began.
func TestJudgeKinds(t *testing.T) {
	t.Parallel()
	txns := map[string]*txnRec{}
	meta := map[string]msgMeta{}
	ledger := map[string]bool{}
	// txn publishes one message per meta entry, keys txn.0, txn.1, ...
	txn := func(name string, outcome byte, inLedger bool, ms ...msgMeta) {
		txns[name] = &txnRec{topic: "t", n: len(ms), outcome: outcome}
		ledger[name] = inLedger
		for j, m := range ms {
			meta[fmt.Sprintf("%s.%d", name, j)] = m
		}
	}
	kp := func(key string, n int64) msgMeta { return msgMeta{order: key, n: n} }
	sq := func(agg string, n int64) msgMeta {
		return msgMeta{ident: fmt.Sprintf("seq:%s/%d", agg, n), order: agg, n: n}
	}
	dd := func(key string) msgMeta { return msgMeta{ident: "dd:" + key} }
	// Key partitions: key K's third message comes before its second; key
	// L's two come in one page (one time, line order).
	txn("k1", 'C', true, kp("K", 1), kp("K", 2))
	txn("k2", 'C', true, kp("K", 3))
	txn("k3", 'C', true, kp("L", 1), kp("L", 2))
	txn("k4", 'R', false, kp("K", 4)) // rolled back: not part of the order
	// Sequences: A/1 published again after a rollback of unknown outcome,
	// A/3 after a commit of unknown outcome (the retry inserts nothing); A/2
	// handed out before the ack of A/1 was sent; A/4 became two messages;
	// B/2 came before B/1.
	txn("s1", 'C', true, sq("A", 2))
	txn("s2", 'U', false, sq("A", 1))
	txn("s3", 'C', true, sq("A", 1))
	txn("s4", 'U', true, sq("A", 3))
	txn("s5", 'C', true, sq("A", 3))
	txn("s6", 'C', true, sq("A", 4))
	txn("s7", 'C', true, sq("A", 4))
	txn("b1", 'C', true, sq("B", 1), sq("B", 2))
	// Delays: d1 delivered before due, d2 after.
	txn("d1", 'C', true, msgMeta{due: 5000})
	txn("d2", 'C', true, msgMeta{due: 5000})
	// Dedupe: X retried after an unknown outcome that had committed (one
	// message), Y became two messages.
	txn("e1", 'U', true, dd("X"))
	txn("e2", 'C', true, dd("X"))
	txn("e3", 'C', true, dd("Y"))
	txn("e4", 'C', true, dd("Y"))
	// Priority: pm-1 (9) committed before pm-2 (1) began, yet came after it
	// in one page; pm-3 (5) after pm-2 is allowed (a later window).
	txn("pm-1", 'C', true, msgMeta{prio: 9})
	txn("pm-2", 'C', true, msgMeta{prio: 1})
	txn("pm-3", 'C', true, msgMeta{prio: 5})
	// ... and across one consumer's pages: pm-4 (8) after pm-5 (2); pm-6
	// (7) after pm-7 (3) came to two consumers (no order between them).
	txn("pm-4", 'C', true, msgMeta{prio: 8})
	txn("pm-5", 'C', true, msgMeta{prio: 2})
	txn("pm-6", 'C', true, msgMeta{prio: 7})
	txn("pm-7", 'C', true, msgMeta{prio: 3})

	var ds []delivery
	d := func(key string, id, lease, at int64) {
		ds = append(ds, delivery{group: "g", topic: "t", msgID: id, key: key, attempt: 1, leaseID: lease,
			consumer: "x", at: at, seq: len(ds)})
	}
	d("k1.0", 1, 1, 100)
	d("k2.0", 3, 2, 200) // before K/2
	d("k1.1", 2, 3, 300)
	d("k3.0", 4, 4, 400)
	d("k3.1", 5, 4, 400)
	d("s3.0", 10, 20, 1000)
	d("s1.0", 11, 21, 1500) // lease 20's ack was sent at 1600: early
	d("s4.0", 12, 22, 2500) // lease 21's ack was sent at 2000: in turn
	d("s6.0", 13, 23, 3000)
	d("s7.0", 14, 24, 3100) // A/4 again, as another message
	d("b1.1", 21, 25, 500)  // B/2 before B/1
	d("b1.0", 20, 26, 600)
	d("d1.0", 30, 27, 4000) // due at 5000
	d("d2.0", 31, 28, 6000)
	d("e1.0", 40, 29, 100)
	d("e3.0", 41, 30, 100)
	d("e4.0", 42, 31, 200) // Y again, as another message
	d("pm-2.0", 51, 32, 700)
	d("pm-1.0", 50, 32, 700) // one page: 9 after 1
	d("pm-3.0", 52, 32, 700)
	d("pm-5.0", 54, 33, 800)
	d("pm-4.0", 53, 34, 900) // the consumer's next page: 8 after 2
	ds = append(ds, delivery{group: "g", topic: "t", msgID: 56, key: "pm-7.0", attempt: 1, leaseID: 35,
		consumer: "y", at: 800, seq: len(ds)})
	d("pm-6.0", 55, 36, 900)
	rs := &records{txns: txns, meta: meta, deliveries: ds, acks: map[int64]string{},
		ackSent: map[int64]int64{20: 1600, 21: 2000, 22: 2600}}
	leases := map[int64]*leaseRow{}
	for _, x := range ds {
		leases[x.leaseID] = &leaseRow{id: x.leaseID, group: "t/g", msgs: append(leases[x.leaseID].msgsOrNil(), x.msgID),
			attempts: append(leases[x.leaseID].attemptsOrNil(), 1)}
	}
	for _, l := range leases {
		l.settled = l.msgs
	}
	topics := []topicSpec{{name: "t", groups: []groupSpec{{name: "g"}}}}
	v := judge(rs, ledger, leases, topics)
	require.Len(t, v.Groups, 1)
	g := v.Groups[0]
	// Committed: K/1..3, L/1..2, A/1..4, B/1..2, d1, d2, X, Y, pm-1..7.
	require.Equal(t, [3]int{22, 22, 0}, [3]int{g.Committed, g.Delivered, g.Missing})
	require.Equal(t, [3]int{4, 2, 2}, [3]int{g.OutOfOrder, g.Early, g.DupIdent}, "%+v", *g)
	o, e := v.ordering()
	require.Equal(t, [2]int{4, 2}, [2]int{o, e})
	lost, bad, rolled := v.totals()
	require.Equal(t, [3]int{0, 2, 0}, [3]int{lost, bad, rolled})
	var sum Summary
	sum.add(v)
	require.Equal(t, "chaos: 0 lost, 2 bad duplicates, 0 rolled-back delivered, 4 out of order, 2 early", sum.Line())
}

func (l *leaseRow) msgsOrNil() []int64 {
	if l == nil {
		return nil
	}
	return l.msgs
}

func (l *leaseRow) attemptsOrNil() []int32 {
	if l == nil {
		return nil
	}
	return l.attempts
}

// A group that subscribed during the run is owed only what committed after
// it did, and a scripted group's redeliveries (seek, replay: attempt 1
// again) are not classified as bugs; anything else still is.
func TestJudgeLateGroup(t *testing.T) {
	t.Parallel()
	since := time.Unix(0, 1000)
	rs := &records{txns: map[string]*txnRec{
		"a": {topic: "t", n: 1, outcome: 'C', at: 500},  // before the group: not owed, not delivered
		"b": {topic: "t", n: 1, outcome: 'C', at: 1500}, // owed, delivered twice (a seek back)
		"c": {topic: "t", n: 1, outcome: 'C', at: 2000}, // owed, never delivered: missing
		"d": {topic: "t", n: 1, outcome: 'U'},           // committed (ledger), no time: not owed
		"e": {topic: "t", n: 1, outcome: 'R'},           // rolled back, delivered: still a bug
	}, acks: map[int64]string{}, meta: map[string]msgMeta{}}
	ledger := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	d := func(id int64, key string, lease int64) delivery {
		return delivery{group: "late", topic: "t", msgID: id, key: key, attempt: 1, leaseID: lease, consumer: "x"}
	}
	rs.deliveries = []delivery{d(2, "b.0", 10), d(2, "b.0", 11), d(5, "e.0", 12)}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := func(id int64, at time.Duration, msg int64) *leaseRow {
		return &leaseRow{id: id, group: "t/late", created: t0.Add(at), expires: t0.Add(at + 3*time.Second),
			msgs: []int64{msg}, attempts: []int32{1}, settled: []int64{msg}}
	}
	leases := map[int64]*leaseRow{10: lease(10, 0, 2), 11: lease(11, time.Second, 2), 12: lease(12, 0, 5)}
	topics := []topicSpec{{name: "t", groups: []groupSpec{{name: "late", since: since, scripted: true}}}}
	v := judge(rs, ledger, leases, topics)
	require.Equal(t, groupResult{Topic: "t", Group: "late", Committed: 2, Delivered: 1, Missing: 1, RolledBack: 1},
		*v.Groups[0])

	// Not scripted: the second lease of message 2 came while the first was
	// live, after it settled the message.
	topics[0].groups[0].scripted = false
	v = judge(rs, ledger, leases, topics)
	require.Equal(t, 1, v.Groups[0].Redelivered)
	require.Equal(t, 1, v.Groups[0].AfterAck)
}

// The record reader takes the kinds' lines (M, T, D with its time) and the
// D lines without a time of older record files, and counts a torn line.
func TestReadRecordsKinds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lines := []string{
		line("B", "pkseq1-1", "chaos.seq", 2),
		line("M", "pkseq1-1", 0, "seq:agg-1/2", "agg-1", 2, 0, -1),
		line("M", "pkseq1-1", 1, "-", "-", 0, 1700, 3),
		line("C", "pkseq1-1", 99),
		line("D", "s1", "chaos.seq", 7, "pkseq1-1.0", 1, 42, "w-1", 1234),
		line("D", "s1", "chaos.seq", 8, "pkseq1-1.1", 1, 42, "w-1"),
		line("T", 42, 1300),
		line("T", 42, 1250), // the earliest T of a lease counts
		line("A", 42, "ok"),
		"M\tpkseq1-1\t2\ttorn",
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.rec"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	rs, err := readRecords(dir)
	require.NoError(t, err)
	require.Equal(t, msgMeta{ident: "seq:agg-1/2", order: "agg-1", n: 2, prio: -1}, rs.meta["pkseq1-1.0"])
	require.Equal(t, msgMeta{due: 1700, prio: 3}, rs.meta["pkseq1-1.1"])
	require.Len(t, rs.deliveries, 2)
	require.Equal(t, [2]int64{1234, 0}, [2]int64{rs.deliveries[0].at, rs.deliveries[1].at})
	require.Equal(t, [2]int{0, 1}, [2]int{rs.deliveries[0].seq, rs.deliveries[1].seq})
	require.Equal(t, int64(1250), rs.ackSent[42])
	require.Equal(t, 1, rs.torn)
}

// With a fault timeline (the soak's S line) a redelivery of a message that a
// worker handled is allowed only when the timeline explains why that
// handling was not acked: killed mid-page (K with its lease), SIGKILLed by
// the harness after it recorded the delivery (X), its ack failed (A), its
// lease lost during a long handler or stopped mid-page or its ack given up
// by the client (F); a page nobody handled may come again. Any other
// redelivery is a bad duplicate (Unexplained), also one whose X line
// predates the delivery, and an ack the client gave up while the lease
// held or through a cancelled context (a client bug, not a fault). The same records without the S line judge as
// before (every expired, unsettled lease may be redelivered).
func TestJudgeFaultTimeline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, lines ...string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
	const ns = int64(1_000_000_000)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dl := func(id, lease int64, attempt int, consumer string, at int64) string {
		return fmt.Sprintf("D\tg\tt\t%d\ta.%d\t%d\t%d\t%s\t%d", id, id-1, attempt, lease, consumer, t0.UnixNano()+at)
	}
	write("p.rec", "B\ta\tt\t12", "C\ta\t1")
	late := t0.UnixNano() + 3*ns // when the first leases expire
	harness := []string{"S\t1",
		fmt.Sprintf("X\tw2-7\t%d", t0.UnixNano()+2*ns), // after w2-7 recorded message 2
		fmt.Sprintf("X\tw3-8\t%d", t0.UnixNano()),      // before w3-8 recorded message 8: explains nothing
	}
	write("h.rec", harness...)
	write("w.rec",
		dl(1, 10, 1, "w1-1", ns), "K\tw1\t10", // killed mid-page
		dl(2, 11, 1, "w2-7", ns),                 // SIGKILLed from outside afterwards
		dl(3, 12, 1, "w1-2", ns), "A\t12\t57P01", // the ack failed
		dl(4, 13, 1, "w4-1", ns), fmt.Sprintf("F\t13\t4\tlost\t%d\tlease lost", late), // long handler, lease lost
		dl(5, 13, 1, "w4-1", ns), fmt.Sprintf("F\t13\t5\tackfailed\t%d\tfenced", late), // handled, ack given up
		dl(6, 14, 1, "w4-1", ns), fmt.Sprintf("F\t14\t6\tstopped\t%d\tstop timeout", 2*ns), // stopped mid-page
		// bad: an ack given up 2 s before the lease ended; an ack sent with a cancelled context
		dl(10, 18, 1, "w4-1", ns), fmt.Sprintf("F\t18\t10\tackfailed\t%d\tack: 57P01", late-2*ns),
		dl(11, 19, 1, "w4-1", ns), fmt.Sprintf("F\t19\t11\tackfailed\t%d\tack: context canceled", late),
		// a TxHandler's transaction failed at its commit: rolled back, at any time
		dl(12, 20, 1, "w5-1", ns), fmt.Sprintf("F\t20\t12\ttxfailed\t%d\tcommit: 57P01", late-2*ns),
		// message 7: lease 15 never recorded by a handler (the read's answer was lost)
		dl(8, 16, 1, "w3-8", ns),                   // handled, nothing explains it: bad
		dl(9, 17, 1, "w4-1", ns), "A\t17\tok late", // acked late: not settled, no fault
		fmt.Sprintf("O\t13\t4\t%d", ns), fmt.Sprintf("P\tw4-1\t%d", ns))
	var leases = map[int64]*leaseRow{}
	for i := int64(1); i <= 12; i++ {
		first, again := 9+i, 100+i
		leases[first] = &leaseRow{id: first, group: "t/g", created: t0, expires: t0.Add(3 * time.Second),
			msgs: []int64{i}, attempts: []int32{1}}
		leases[again] = &leaseRow{id: again, group: "t/g", created: t0.Add(4 * time.Second),
			expires: t0.Add(7 * time.Second), msgs: []int64{i}, attempts: []int32{2}, settled: []int64{i}}
	}
	// Messages 4 and 5 share lease 13, 6 has 14, ...: renumber as the lines say.
	leases[13].msgs, leases[13].attempts = []int64{4, 5}, []int32{1, 1}
	for i, l := range map[int64]int64{6: 14, 7: 15, 8: 16, 9: 17, 10: 18, 11: 19, 12: 20} {
		leases[l] = &leaseRow{id: l, group: "t/g", created: t0, expires: t0.Add(3 * time.Second), msgs: []int64{i},
			attempts: []int32{1}}
	}
	delete(leases, 21)
	topics := []topicSpec{{name: "t", groups: []groupSpec{{name: "g"}}}}

	rs, err := readRecords(dir)
	require.NoError(t, err)
	require.Zero(t, rs.torn)
	v := judge(rs, map[string]bool{"a": true}, leases, topics)
	g := v.Groups[0]
	require.Equal(t, 12, g.Redelivered)
	require.Equal(t, 8, g.Allowed, "explained: %v", v.Explained)
	require.Equal(t, 4, g.Unexplained, "message 8 (X before its delivery), 9 (acked late: ok, yet redelivered), "+
		"10 (ack given up early), 11 (cancelled context)")
	require.Equal(t, map[string]int{"killed mid-page": 1, "killed": 1, "ack failed": 1, "lost": 1, "ackfailed": 1,
		"stopped": 1, "never handled": 1, "txfailed": 1}, v.Explained)
	require.Equal(t, [2]int{1, 1}, [2]int{v.Overruns, v.Stops})
	_, bad, _ := v.totals()
	require.Equal(t, 4+1, bad, "the unexplained redeliveries, and lease 17's ok ack that settled nothing")

	// Without the timeline: the server-side rules only.
	write("h.rec", harness[1:]...)
	rs, err = readRecords(dir)
	require.NoError(t, err)
	v = judge(rs, map[string]bool{"a": true}, leases, topics)
	require.Equal(t, 12, v.Groups[0].Allowed)
	require.Zero(t, v.Groups[0].Unexplained)
}

// A client counts its lease from the start of its read, before the server
// made the lease: under machine load the read took 2 s, and the client that
// gave its ack up at its own deadline (the server down) did so 2 s before
// the server's expiry. That is a fault (the ack failed), not a client that
// dropped its ack early; one that gives up early by its own count still is.
func TestJudgeClientDeadlineFromItsRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, lines ...string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	}
	const ms = int64(time.Millisecond)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d int64) int64 { return t0.UnixNano() + d }
	dl := func(id, lease int64, attempt int, at int64) string {
		return fmt.Sprintf("D\tg\tt\t%d\ta.%d\t%d\t%d\tc-1\t%d", id, id-1, attempt, lease, at)
	}
	write("p.rec", "B\ta\tt\t3", "C\ta\t1")
	write("h.rec", "S\t1")
	write("w.rec",
		dl(1, 40, 1, at(-1200*ms)), // the previous page, handled at -1.2 s; its read of lease 41 starts then
		dl(2, 41, 1, at(1100*ms)),  // the read returned 2.3 s later (the server made the lease at +1 s)
		// the server was down: the ack retried until the client's deadline (-1.2 s + 3 s), less a backoff
		fmt.Sprintf("F\t41\t2\tackfailed\t%d\tack: gave up (the lease runs out): connection refused", at(1300*ms)),
		dl(3, 43, 1, at(1250*ms)), // read at once (after message 2): lease 43 made at +1.2 s
		fmt.Sprintf("F\t43\t3\tackfailed\t%d\tack: gave up", at(1500*ms))) // 2.6 s early by any count
	lease := func(id int64, from, to time.Duration, msg int64, attempt int32, settled bool) *leaseRow {
		l := &leaseRow{id: id, group: "t/g", created: t0.Add(from), expires: t0.Add(to), msgs: []int64{msg},
			attempts: []int32{attempt}}
		if settled {
			l.settled = []int64{msg}
		}
		return l
	}
	leases := map[int64]*leaseRow{
		40: lease(40, -1300*time.Millisecond, 1700*time.Millisecond, 1, 1, true),
		41: lease(41, time.Second, 4*time.Second, 2, 1, false),
		42: lease(42, 5*time.Second, 8*time.Second, 2, 2, true),
		43: lease(43, 1200*time.Millisecond, 4200*time.Millisecond, 3, 1, false),
		44: lease(44, 5*time.Second, 8*time.Second, 3, 2, true),
	}
	topics := []topicSpec{{name: "t", groups: []groupSpec{{name: "g"}}}}
	rs, err := readRecords(dir)
	require.NoError(t, err)
	require.Zero(t, rs.torn)
	v := judge(rs, map[string]bool{"a": true}, leases, topics)
	g := v.Groups[0]
	require.Equal(t, 2, g.Redelivered)
	require.Equal(t, 1, g.Allowed, "message 2: given up at the client's own deadline; explained: %v", v.Explained)
	require.Equal(t, 1, g.Unexplained, "message 3: given up 2.6 s before its deadline")
	require.Equal(t, map[string]int{"ackfailed": 1}, v.Explained)
	require.Len(t, v.Unexplained, 1)
	require.Contains(t, v.Unexplained[0], "t/g message 3: lease 43")
	require.Contains(t, v.Unexplained[0], "not acked: ackfailed at 00:00:01.500")
}
