package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// groupResult is one row of the verifier's table.
type groupResult struct {
	Topic, Group string
	Committed    int // keys whose transaction committed
	Delivered    int // distinct committed keys recorded by the group's consumers
	Missing      int // committed keys never delivered (lost)
	RolledBack   int // rolled-back keys delivered
	Redelivered  int // server-side redeliveries (a later lease of a message)
	Allowed      int // ... after a crash or lease expiry (with a fault timeline: explained by it)
	// Unexplained: bug: with a fault timeline (the soak), a redelivery of a
	// message that a worker handled under the previous lease although no
	// fault explains why that handling was not acked (killed mid-page or
	// from outside, its ack failed, its lease lost during a long handler,
	// stopped mid-page): a message handled twice for no reason.
	Unexplained   int
	AfterAck      int // bug: redelivered although a previous lease settled (acked) it
	LiveLeases    int // bug: a lease taken while the previous lease of the message was live
	BadAttempt    int // bug: attempt not previous + 1 (or the first not 1)
	AckNotSettled int // bug: fanout.ack reported OK but the lease's messages are not settled
	Phantom       int // bug: a recorded delivery the server has no lease for
	// LostCommit are keys whose COMMIT returned OK but that the server does
	// not have (a lost commit: a bug, except after an asynchronous-replication
	// failover, where it is the measured loss window); not in Missing.
	LostCommit int
	// DupIdent: bug: a dedupe key or an aggregate's sequence that the group
	// got as more than one message (each retry must return the first).
	DupIdent int
	// OutOfOrder: bug: a key's (key partitions) or an aggregate's
	// (sequences) message first delivered before an earlier one of it was
	// (in the order of the workers' records).
	OutOfOrder int
	// Early: bug: delivered before its deliver_at, or a sequence delivered
	// before the ack of its predecessor was even sent.
	Early int
}

func (g groupResult) bad(async bool) int {
	n := g.AfterAck + g.LiveLeases + g.BadAttempt + g.AckNotSettled + g.DupIdent + g.Unexplained
	if !async {
		n += g.Phantom
	}
	return n
}

// verdict is the outcome of one verified run.
type verdict struct {
	Groups         []*groupResult
	Txns           struct{ Committed, RolledBack, UnknownCommitted, UnknownRolledBack, CommitLost int }
	CommitLostMsgs int // messages of transactions whose COMMIT returned OK but that the server does not have
	// FirstLostCommit, LastLostCommit: unix nanos when the first and the
	// last lost commit returned OK.
	FirstLostCommit, LastLostCommit int64
	// AsyncFailover: lost commits and deliveries whose lease the new primary
	// never received are the measured loss window of asynchronous
	// replication, reported but not counted as lost or bad.
	AsyncFailover bool
	Consistency   []string // fanout.check_consistency() rows
	GroupsView    string   // fanout.groups at the end
	TornLines     int
	SelfKills     int
	// Explained counts the allowed redeliveries by what explains them
	// (only with a fault timeline); Overruns and Stops count the client
	// workers' handlers that overran their lease and shutdowns mid-page.
	Explained            map[string]int
	Unexplained          []string // the first few unexplained redeliveries, for the report
	Overruns, Stops      int
	Timeline             bool
	LateAcks, LateAcksOK int
	// Kinds: how much the checks of the newer kinds had to judge (all groups).
	Kinds struct {
		OrderPairs   int // consecutive messages of a key or aggregate whose order was checked
		AckChecks    int // sequences checked against the sending of their predecessor's ack
		Delayed      int // deliveries of delayed messages checked against their due time
		Idents       int // dedupe keys and sequences checked for being one message
		Retried      int // ... of which more than one transaction published
		PrioChecks   int // first deliveries checked for priority order
		DroppedParts string
	}
}

// ordering counts the out-of-order and early deliveries of every group.
func (v *verdict) ordering() (outOfOrder, early int) {
	for _, g := range v.Groups {
		outOfOrder += g.OutOfOrder
		early += g.Early
	}
	return outOfOrder, early
}

func (v *verdict) totals() (lost, bad, rolled int) {
	for _, g := range v.Groups {
		lost += g.Missing
		if !v.AsyncFailover {
			lost += g.LostCommit
		}
		bad += g.bad(v.AsyncFailover)
		rolled += g.RolledBack
	}
	return lost, bad, rolled
}

// order is the internal id (the id when none was read).
func (l *leaseRow) order() int64 {
	if l.raw != 0 {
		return l.raw
	}
	return l.id
}

type leaseRow struct {
	id                 int64 // as read returned it
	raw                int64 // fanout.lease's (slot * 2^32 + epoch * 2^16 + page); 0: id is
	group              string
	created, expires   time.Time
	msgs               []int64
	attempts           []int32
	settled, reclaimed []int64
}

// verify judges the run from the record files and the server's state.
func verify(ctx context.Context, dbURL, runDir string, topics []topicSpec) (*verdict, error) {
	rs, err := readRecords(runDir)
	if err != nil {
		return nil, fmt.Errorf("verify: records: %w", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	defer conn.Close(ctx)
	// Transaction outcomes: the producer's record, else the ledger.
	ledger := map[string]bool{}
	rows, err := conn.Query(ctx, `SELECT txn FROM chaos.txn`)
	if err != nil {
		return nil, fmt.Errorf("verify: ledger: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("verify: ledger: %w", err)
	}
	for _, n := range names {
		ledger[n] = true
	}
	// The server's leases: the delivery history of every message (every page
	// of every lease slot, kept by the harness's lease log: freshDatabase).
	// Keyed by the id read returned (what the workers recorded), ordered by
	// the internal one (fanout._lease_code).
	rows, err = conn.Query(ctx, `SELECT fanout._lease_code(l.lease_id, true), l.lease_id,
			t.topic || '/' || coalesce(g.group_name, 'queue'), l.created_at,
			l.expires_at, l.msg_ids, l.attempts, l.settled, l.reclaimed
		FROM chaos.lease_all l JOIN fanout.consumer_group g USING (group_id) JOIN fanout.topic t USING (topic_id)
		ORDER BY l.lease_id`)
	if err != nil {
		return nil, fmt.Errorf("verify: leases: %w", err)
	}
	leases := map[int64]*leaseRow{}
	var l leaseRow
	_, err = pgx.ForEachRow(rows, []any{&l.id, &l.raw, &l.group, &l.created, &l.expires, &l.msgs, &l.attempts, &l.settled,
		&l.reclaimed}, func() error {
		c := l
		leases[c.id] = &c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify: leases: %w", err)
	}

	v := judge(rs, ledger, leases, topics)

	rows, err = conn.Query(ctx, `SELECT format('%s %s %s %s: %s', topic, coalesce(group_name, '-'), message_id, status, problem)
		FROM fanout.check_consistency()`)
	if err != nil {
		return nil, fmt.Errorf("verify: check_consistency: %w", err)
	}
	if v.Consistency, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("verify: check_consistency: %w", err)
	}
	rows, err = conn.Query(ctx, `SELECT topic, coalesce(group_name, '(queue)'), status, lag_messages, in_flight,
		retry_pending, dead_letters, lost_messages, delivered FROM fanout.groups ORDER BY topic, group_name`)
	if err != nil {
		return nil, fmt.Errorf("verify: groups: %w", err)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "topic\tgroup\tstatus\tlag\tin_flight\tretry\tdead_letters\tlost\tdelivered")
	var vals [9]any
	var s [3]string
	var n [6]int64
	vals = [9]any{&s[0], &s[1], &s[2], &n[0], &n[1], &n[2], &n[3], &n[4], &n[5]}
	if _, err := pgx.ForEachRow(rows, vals[:], func() error {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", s[0], s[1], s[2], n[0], n[1], n[2], n[3], n[4], n[5])
		return nil
	}); err != nil {
		return nil, fmt.Errorf("verify: groups: %w", err)
	}
	tw.Flush()
	v.GroupsView = b.String()
	// Key partitions rotate and drop (ids of partition n start at n << 32,
	// from 0): what is missing below the highest was dropped.
	if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(format('%s %s', topic, dropped), ', '), '-') FROM (
			SELECT t.topic, max(p.part_no) + 1 - count(*) AS dropped
			FROM fanout.partition p JOIN fanout.topic t USING (topic_id) GROUP BY t.topic ORDER BY t.topic) x`).
		Scan(&v.Kinds.DroppedParts); err != nil {
		return nil, fmt.Errorf("verify: partitions: %w", err)
	}
	return v, nil
}

// judge classifies a run: rs from the record files, ledger the rows of
// chaos.txn, leases every fanout.lease row by id (group as "topic/group").
// Per group and message, the server's leases in id order are its delivery
// history; each later lease is a redelivery, allowed only when the previous
// lease had expired and not settled the message and the attempt grew by one.
func judge(rs *records, ledger map[string]bool, leases map[int64]*leaseRow, topics []topicSpec) *verdict {
	v := &verdict{TornLines: rs.torn, SelfKills: rs.selfKills, LateAcks: rs.lateAcks, LateAcksOK: rs.lateAcksOK,
		Explained: map[string]int{}, Overruns: rs.overruns, Stops: rs.stops, Timeline: rs.timeline}
	type gm struct {
		group string
		msg   int64
	}
	history := map[gm][]*leaseRow{}
	ids := make([]int64, 0, len(leases))
	for id := range leases {
		ids = append(ids, id)
	}
	// In the order they were handed out (internal lease ids are slot *
	// 2^32 + epoch * 2^16 + page, not a clock).
	slices.SortFunc(ids, func(a, b int64) int {
		if c := leases[a].created.Compare(leases[b].created); c != 0 {
			return c
		}
		return cmp.Compare(leases[a].order(), leases[b].order())
	})
	for _, id := range ids {
		l := leases[id]
		for _, m := range l.msgs {
			history[gm{l.group, m}] = append(history[gm{l.group, m}], l)
		}
	}
	// A message is its key (txn.j) unless an M line gives it an identity
	// that retries share (a dedupe key, an aggregate's sequence).
	ident := func(key string) string {
		if m, ok := rs.meta[key]; ok && m.ident != "" {
			return m.ident
		}
		return key
	}
	committedKeys := map[string]map[string]bool{} // topic → identities
	lostCommit := map[string]bool{}
	onServer := map[string]bool{}     // identities some transaction in the ledger committed
	committedAt := map[string]int64{} // identity → when a COMMIT of it returned OK (the latest)
	rolledKeys := map[string]bool{}
	for txn, t := range rs.txns {
		committed := false
		switch {
		case t.outcome == 'C':
			committed = true
			v.Txns.Committed++
			if !ledger[txn] {
				v.Txns.CommitLost++ // COMMIT returned OK, the server does not have it
				v.CommitLostMsgs += t.n
				for j := range t.n {
					lostCommit[ident(fmt.Sprintf("%s.%d", txn, j))] = true
				}
				if v.FirstLostCommit == 0 || t.at < v.FirstLostCommit {
					v.FirstLostCommit = t.at
				}
				v.LastLostCommit = max(v.LastLostCommit, t.at)
			}
		case t.outcome == 'R':
			v.Txns.RolledBack++
		case ledger[txn]:
			committed = true
			v.Txns.UnknownCommitted++
		default:
			v.Txns.UnknownRolledBack++
		}
		for j := range t.n {
			k := fmt.Sprintf("%s.%d", txn, j)
			if committed {
				if committedKeys[t.topic] == nil {
					committedKeys[t.topic] = map[string]bool{}
				}
				committedKeys[t.topic][ident(k)] = true
				if t.outcome == 'C' {
					committedAt[ident(k)] = max(committedAt[ident(k)], t.at)
				}
				if ledger[txn] {
					onServer[ident(k)] = true
				}
			} else {
				rolledKeys[k] = true
			}
		}
	}

	byGroup := map[string]*groupResult{}
	specs := map[string]groupSpec{}
	// owed: whether the group must get identity k (a group that subscribed
	// during the run: what committed after it did).
	owed := func(g groupSpec, k string) bool {
		return g.since.IsZero() || committedAt[k] >= g.since.UnixNano()
	}
	for _, t := range topics {
		for _, g := range t.groups {
			r := &groupResult{Topic: t.name, Group: g.label()}
			for k := range committedKeys[t.name] {
				if owed(g, k) {
					r.Committed++
				}
			}
			v.Groups = append(v.Groups, r)
			byGroup[t.name+"/"+g.label()] = r
			specs[t.name+"/"+g.label()] = g
		}
	}
	seen := map[string]map[string]bool{}
	for _, d := range rs.deliveries {
		gk := d.topic + "/" + d.group
		r := byGroup[gk]
		if r == nil {
			continue
		}
		if seen[gk] == nil {
			seen[gk] = map[string]bool{}
		}
		if rolledKeys[d.key] && !seen[gk][d.key] {
			r.RolledBack++
		}
		seen[gk][d.key] = true
		seen[gk][ident(d.key)] = true
		lr := leases[d.leaseID]
		if lr == nil || lr.group != gk {
			r.Phantom++
			continue
		}
		i := slices.Index(lr.msgs, d.msgID)
		if i < 0 || int(lr.attempts[i]) != d.attempt {
			r.Phantom++
		}
	}
	for gk, r := range byGroup {
		topic := r.Topic
		for k := range committedKeys[topic] {
			switch {
			case !owed(specs[gk], k):
			case seen[gk][k]:
				r.Delivered++
			case lostCommit[k] && !onServer[k]:
				r.LostCommit++
			default:
				r.Missing++
			}
		}
	}
	handled := map[[2]int64][]delivery{} // (lease, message) → its D lines
	for _, d := range rs.deliveries {
		handled[[2]int64{d.leaseID, d.msgID}] = append(handled[[2]int64{d.leaseID, d.msgID}], d)
	}
	for key, hist := range history {
		r := byGroup[key.group]
		if r == nil || specs[key.group].scripted {
			continue
		}
		if hist[0].attempts[slices.Index(hist[0].msgs, key.msg)] != 1 {
			r.BadAttempt++
		}
		for i := 1; i < len(hist); i++ {
			prev, next := hist[i-1], hist[i]
			r.Redelivered++
			pa := prev.attempts[slices.Index(prev.msgs, key.msg)]
			na := next.attempts[slices.Index(next.msgs, key.msg)]
			switch {
			case slices.Contains(prev.settled, key.msg):
				r.AfterAck++
			case next.created.Before(prev.expires):
				r.LiveLeases++
			case na != pa+1:
				r.BadAttempt++
			case !rs.timeline:
				r.Allowed++
			default:
				if why := rs.explain(handled, prev, key.msg); why != "" {
					r.Allowed++
					v.Explained[why]++
				} else {
					r.Unexplained++
					if len(v.Unexplained) < 10 {
						v.Unexplained = append(v.Unexplained, rs.describe(handled, key.group, key.msg, prev, next))
					}
				}
			}
		}
	}
	// Acks the SQL workers saw succeed must have settled their whole lease.
	for id, outcome := range rs.acks {
		if outcome != "ok" {
			continue
		}
		lr := leases[id]
		if lr == nil {
			continue // not one of ours (cannot happen: leases live an hour)
		}
		for _, m := range lr.msgs {
			if !slices.Contains(lr.settled, m) {
				if r := byGroup[lr.group]; r != nil {
					r.AckNotSettled++
				}
			}
		}
	}

	judgeKinds(v, rs, leases, byGroup, committedKeys, ident)
	return v
}

// clientGiveUpMargin is how long before the lease's expiry on the server
// a correct client may give an ack or an extension up for good: it stops
// retrying when the next try would start after the lease's local deadline
// (which is no later than the server's), its backoff at most the workers'
// MaxErrorBackoff.
const clientGiveUpMargin = clientMaxErrorBackoff + 250*time.Millisecond

// explain says why message msg, delivered under lease, may be delivered
// again (the fault timeline), or "" when nothing explains it: nobody
// handled it (the read's answer never reached a handler), a worker
// recorded why its handling was not acked (F and K lines), the worker's
// ack of the lease failed (A line), or the harness SIGKILLed the consumer
// after it recorded the delivery (X line). A client's ack given up (or
// lease lost) counts only when the client found out once the lease was
// (about to be) over by the client's own count (clientDeadline), and not
// through a cancelled context: a correct client
// retries while the lease holds and settles with a context that outlives
// its stop (an ack dropped early is a client bug, not a fault).
func (rs *records) explain(handled map[[2]int64][]delivery, lease *leaseRow, msg int64) string {
	ds := handled[[2]int64{lease.id, msg}]
	if len(ds) == 0 {
		return "never handled"
	}
	n, ok := rs.notAcked[lease.id][msg]
	if !ok {
		n, ok = rs.notAcked[lease.id][0]
	}
	if ok {
		if n.reason == "ackfailed" && strings.Contains(n.cause, "context canceled") {
			return ""
		}
		if (n.reason == "ackfailed" || n.reason == "lost") && n.at < rs.clientDeadline(lease).Add(-clientGiveUpMargin).UnixNano() {
			return ""
		}
		return n.reason
	}
	if out, ok := rs.acks[lease.id]; ok && out != "ok" {
		return "ack failed"
	}
	for _, d := range ds {
		if at, ok := rs.killedAt[d.consumer]; ok && at >= d.at {
			return "killed"
		}
	}
	return ""
}

// describe is one unexplained redelivery in the report: the two leases
// (server times), the handlings of the first and what the timeline says
// about them.
func (rs *records) describe(handled map[[2]int64][]delivery, group string, msg int64, prev, next *leaseRow) string {
	ts := func(t time.Time) string { return t.UTC().Format("15:04:05.000") }
	s := fmt.Sprintf("%s message %d: lease %d (made %s, expires %s) then lease %d (made %s)", group, msg,
		prev.id, ts(prev.created), ts(prev.expires), next.id, ts(next.created))
	for _, d := range handled[[2]int64{prev.id, msg}] {
		s += fmt.Sprintf("; handled by %s at %s", d.consumer, ts(time.Unix(0, d.at)))
	}
	if after, ok := rs.readAfter[prev.id]; ok {
		s += fmt.Sprintf("; read after %s", ts(time.Unix(0, after)))
	}
	for _, k := range []int64{msg, 0} {
		if n, ok := rs.notAcked[prev.id][k]; ok {
			s += fmt.Sprintf("; not acked: %s at %s (%s)", n.reason, ts(time.Unix(0, n.at)), n.cause)
		}
	}
	if out, ok := rs.acks[prev.id]; ok {
		s += "; ack: " + out
	}
	return s
}

// clientDeadline is the latest a correct client may take the lease to run
// until: its deadline is counted from the start of its read (the client
// cannot know when the server made the lease), so it ends before the
// server's expiry by the read's latency, which machine load stretches to
// seconds. The read began after the consumer's previous page was handled
// (readAfter): from then, as long as the lease lasted on the server
// (extensions included); the server's expiry when that is not known (the
// consumer's first page).
func (rs *records) clientDeadline(lease *leaseRow) time.Time {
	after, ok := rs.readAfter[lease.id]
	if !ok {
		return lease.expires
	}
	if d := time.Unix(0, after).Add(lease.expires.Sub(lease.created)); d.Before(lease.expires) {
		return d
	}
	return lease.expires
}

// judgeKinds checks what the newer kinds promise, per group (byGroup by
// "topic/group"): one message per dedupe key and per aggregate sequence;
// per-key and per-aggregate order of first deliveries (by the time the
// workers recorded them: a correct server hands a key's next page out only
// after the previous one was settled, which is after it was recorded); no
// delivery before its deliver_at; no sequence before the ack of its
// predecessor was sent (T lines; only where the lease that settled the
// predecessor was acked by a worker that writes them).
func judgeKinds(v *verdict, rs *records, leases map[int64]*leaseRow, byGroup map[string]*groupResult,
	committed map[string]map[string]bool, ident func(string) string) {
	published := map[string]int{} // identity → transactions that published it
	for _, m := range rs.meta {
		if m.ident != "" {
			published[m.ident]++
		}
	}
	for _, n := range published {
		v.Kinds.Idents++
		if n > 1 {
			v.Kinds.Retried++
		}
	}
	type gi struct{ group, ident string }
	first := map[gi]delivery{}
	ids := map[gi]map[int64]bool{}
	for _, d := range rs.deliveries {
		gk := d.topic + "/" + d.group
		if byGroup[gk] == nil {
			continue
		}
		m, ok := rs.meta[d.key]
		if !ok {
			continue
		}
		x := gi{gk, ident(d.key)}
		if ids[x] == nil {
			ids[x] = map[int64]bool{}
		}
		ids[x][d.msgID] = true
		if f, ok := first[x]; !ok || before(d, f) {
			first[x] = d
		}
		if m.due != 0 && d.at != 0 {
			v.Kinds.Delayed++
			if d.at < m.due {
				byGroup[gk].Early++
			}
		}
	}
	for x, s := range ids {
		if len(s) > 1 && x.ident != "" && rs.meta[first[x].key].ident != "" {
			byGroup[x.group].DupIdent++
		}
	}
	// Priority: one consumer's first deliveries (attempt 1) of undelayed
	// messages, in the order it recorded them (its reads are one after the
	// other), must not bring a message after one of lower priority whose
	// transaction began after its own had committed (one producer, one
	// transaction at a time): it was then in that one's snapshot window or
	// an earlier one, so it came first (fanout.read: by priority inside a
	// window, windows in order). Per consumer and producer, the highest
	// transaction number seen so far at each priority.
	type cp struct{ group, consumer, producer string }
	highest := map[cp]*[10]int{}
	for _, d := range rs.deliveries { // (in record order within a file)
		m, ok := rs.meta[d.key]
		if !ok || m.prio < 0 || m.prio > 9 || m.due != 0 || d.attempt != 1 {
			continue
		}
		prod, n := txnOf(d.key)
		x := cp{d.topic + "/" + d.group, d.consumer, prod}
		h := highest[x]
		if h == nil {
			h = &[10]int{-1, -1, -1, -1, -1, -1, -1, -1, -1, -1}
			highest[x] = h
		}
		v.Kinds.PrioChecks++
		for q := range m.prio {
			if h[q] > n {
				if r := byGroup[x.group]; r != nil {
					r.OutOfOrder++
				}
				break
			}
		}
		h[m.prio] = max(h[m.prio], n)
	}
	// Per group and key (or aggregate): the committed messages by number.
	type gk struct{ group, order string }
	type item struct {
		n int64
		d delivery
	}
	chains := map[gk][]item{}
	for x, d := range first {
		m := rs.meta[d.key]
		if m.order == "" || d.at == 0 {
			continue
		}
		topic, _, _ := strings.Cut(x.group, "/")
		if !committed[topic][x.ident] {
			continue
		}
		chains[gk{x.group, m.order}] = append(chains[gk{x.group, m.order}], item{m.n, d})
	}
	// The earliest T line of a lease that settled a message, per group.
	settledAt := map[gi]int64{}
	for _, l := range leases {
		at, ok := rs.ackSent[l.id]
		if !ok {
			continue
		}
		for _, m := range l.settled {
			x := gi{l.group, fmt.Sprint(m)}
			if old, ok := settledAt[x]; !ok || at < old {
				settledAt[x] = at
			}
		}
	}
	for c, items := range chains {
		slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.n, b.n) })
		seq := strings.HasPrefix(rs.meta[items[0].d.key].ident, "seq:")
		for i := 1; i < len(items); i++ {
			prev, next := items[i-1], items[i]
			v.Kinds.OrderPairs++
			if before(next.d, prev.d) {
				byGroup[c.group].OutOfOrder++
			}
			if !seq || next.n != prev.n+1 {
				continue
			}
			if at, ok := settledAt[gi{c.group, fmt.Sprint(prev.d.msgID)}]; ok {
				v.Kinds.AckChecks++
				if next.d.at < at {
					byGroup[c.group].Early++
				}
			}
		}
	}
}

// txnOf splits a key (<producer>-<number>.<j>) into its producer and the
// number of its transaction.
func txnOf(key string) (string, int) {
	txn, _, _ := strings.Cut(key, ".")
	i := strings.LastIndexByte(txn, '-')
	n, err := strconv.Atoi(txn[i+1:])
	if i < 0 || err != nil {
		return key, -1
	}
	return txn[:i], n
}

// before orders deliveries by the time they were recorded, then by their
// place in the records (one page's lines share a time).
func before(a, b delivery) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// print writes the per-group table and the server-side checks.
func (v *verdict) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "topic/group\tcommitted\tdelivered\tmissing\trolled-back-delivered\tredelivered\tallowed\t"+
		"unexplained\tafter-ack\ttwo-live-leases\tbad-attempt\tack-not-settled\tphantom\tlost-commit\tdup-key\tout-of-order\t"+
		"early\t")
	for _, g := range v.Groups {
		fmt.Fprintf(tw, "%s/%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", g.Topic, g.Group,
			g.Committed, g.Delivered, g.Missing, g.RolledBack, g.Redelivered, g.Allowed, g.Unexplained, g.AfterAck, g.LiveLeases,
			g.BadAttempt, g.AckNotSettled, g.Phantom, g.LostCommit, g.DupIdent, g.OutOfOrder, g.Early)
	}
	tw.Flush()
	fmt.Fprintf(w, "transactions: %d committed, %d rolled back, unknown outcome (commit interrupted) settled by the ledger: "+
		"%d committed, %d rolled back; COMMIT returned OK but missing on the server: %d (%d messages)\n",
		v.Txns.Committed, v.Txns.RolledBack, v.Txns.UnknownCommitted, v.Txns.UnknownRolledBack, v.Txns.CommitLost,
		v.CommitLostMsgs)
	if v.Timeline {
		why := make([]string, 0, len(v.Explained))
		for k, n := range v.Explained {
			why = append(why, fmt.Sprintf("%s %d", k, n))
		}
		slices.Sort(why)
		fmt.Fprintf(w, "fault timeline: client handlers overran their lease %d times, %d client shutdowns mid-page; "+
			"allowed redeliveries by cause: %s\n", v.Overruns, v.Stops, strings.Join(why, ", "))
	}
	for _, u := range v.Unexplained {
		fmt.Fprintf(w, "unexplained redelivery: %s\n", u)
	}
	fmt.Fprintf(w, "acks after lease expiry: %d (%d succeeded: nobody had taken the page; %d fenced)\n", v.LateAcks,
		v.LateAcksOK, v.LateAcks-v.LateAcksOK)
	if k := v.Kinds; k.OrderPairs+k.Delayed+k.Idents > 0 {
		fmt.Fprintf(w, "ordered kinds: %d consecutive pairs of a key or aggregate checked for order, %d sequences "+
			"against their predecessor's ack, %d deliveries of delayed messages against their due time, %d dedupe keys "+
			"and sequences checked for being one message (%d published by more than one transaction), %d first deliveries "+
			"for priority order\n", k.OrderPairs, k.AckChecks, k.Delayed, k.Idents, k.Retried, k.PrioChecks)
	}
	if v.Kinds.DroppedParts != "" {
		fmt.Fprintf(w, "table partitions dropped during the run: %s\n", v.Kinds.DroppedParts)
	}
	if v.TornLines > 0 {
		fmt.Fprintf(w, "record lines torn by a SIGKILL (ignored): %d\n", v.TornLines)
	}
	if len(v.Consistency) == 0 {
		fmt.Fprintln(w, "fanout.check_consistency(): no rows")
	} else {
		fmt.Fprintf(w, "fanout.check_consistency(): %d rows\n  %s\n", len(v.Consistency), strings.Join(v.Consistency, "\n  "))
	}
	fmt.Fprintf(w, "fanout.groups:\n%s", v.GroupsView)
}
