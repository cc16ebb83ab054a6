package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Record files are append-only text, one tab-separated record per line,
// each line written with a single write(2). A process killed with SIGKILL
// keeps everything it wrote (the page cache outlives the process); a server
// crash does not touch them. A torn last line is ignored by the reader.
//
// Producer lines:
//
//	B txn topic n   before BEGIN: txn will publish keys txn.0 … txn.(n-1)
//	C txn nanos     COMMIT returned success (at unix nanos)
//	R txn           deliberately rolled back
//	U txn error     the outcome is unknown (the commit or an earlier statement failed);
//	                the verifier asks the ledger table chaos.txn
//	M txn j ident order n due prio   message j of txn (the kinds' producers, producer_kinds.go):
//	                ident is what makes it one message ("-": the key txn.j; a
//	                sequence "seq:<aggregate>/<n>" or a dedupe key "dd:<key>", which a
//	                retry publishes again under another txn); order/n its per-key
//	                (key partitions) or per-aggregate (sequences) position ("-" 0:
//	                none); due the unix nanos it is delivered at the earliest (0: now);
//	                prio its priority (-1: not judged, a delayed message)
//
// Consumer lines:
//
//	D group topic message_id key attempt lease_id consumer [nanos]   delivered (before the ack;
//	                                                          nanos: when it was recorded)
//	T lease_id nanos                                          about to send fanout.ack(lease_id)
//	                                                          (worker_kinds.go)
//	A lease_id ok|<sqlstate or error>[ late]                  fanout.ack(lease_id) returned (SQL workers;
//	                                                          late: sent after the lease expired)
//	K worker [lease_id]                                       about to SIGKILL itself mid-page (holding lease_id)
//
// The fault timeline (the soak; with an S line the verifier allows a
// redelivery of a message that a worker handled only when one of these
// lines, an A line with an error, or a K line explains why the handling
// was not acked):
//
//	S nanos                                     the soak's timeline starts (harness)
//	X consumer nanos                            the harness SIGKILLed that consumer's process
//	O lease_id message_id nanos                 a client worker's handler starts overrunning the lease
//	P consumer nanos                            a client worker starts a shutdown mid-page
//	F lease_id message_id reason nanos [error]  a client worker handled the message but it was not
//	                                            acked: lost (the handler's context: ErrLeaseLost),
//	                                            stopped (ErrStopTimeout), ackfailed (OnAckFailed),
//	                                            txfailed (OnAckFailed of a TxHandler's transaction)
type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func newRecorder(path string) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: record file: %w", err)
	}
	return &recorder{f: f}, nil
}

// write appends lines (each without its newline) in one write(2).
func (r *recorder) write(lines ...string) error {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.f.WriteString(b.String())
	return err
}

func (r *recorder) Close() error { return r.f.Close() }

func line(fields ...any) string {
	s := make([]string, len(fields))
	for i, f := range fields {
		s[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(fmt.Sprint(f))
	}
	return strings.Join(s, "\t")
}

// delivery is one D line.
type delivery struct {
	group, topic string
	msgID        int64
	key          string
	attempt      int
	leaseID      int64
	consumer     string
	at           int64 // unix nanos when recorded (0: not recorded)
	seq          int   // position among all deliveries read (file, then line order)
}

// msgMeta is what an M line says about one message.
type msgMeta struct {
	ident string // "" for the key itself
	order string // key or aggregate ("" for none)
	n     int64  // position in order
	due   int64  // unix nanos (0: no delay)
	prio  int    // priority (-1: not judged)
}

// txnRec is what the producer files say about one transaction.
type txnRec struct {
	topic   string
	n       int
	outcome byte  // 'C', 'R', 'U' or 0 (only B: the producer stopped or died)
	at      int64 // C: unix nanos when COMMIT returned
}

type records struct {
	txns       map[string]*txnRec
	deliveries []delivery
	acks       map[int64]string // lease → "ok" or the error (SQL workers)
	ackSent    map[int64]int64  // lease → unix nanos before the ack was sent (T lines)
	meta       map[string]msgMeta
	torn       int
	selfKills  int // workers that SIGKILLed themselves mid-page
	lateAcks   int // acks sent after the lease expired ...
	lateAcksOK int // ... of which succeeded (nobody had taken the page)

	// timeline: an S line was read; redeliveries of handled messages must
	// be explained by the fault lines below.
	timeline bool
	// notAcked: lease → message → why a worker's handling of it was not
	// acked (F lines; 0 for a whole lease: a K line).
	notAcked map[int64]map[int64]notAcked
	killedAt map[string]int64 // consumer → unix nanos when the harness SIGKILLed it (X lines)
	// readAfter: lease → unix nanos of its consumer's last D line before
	// the lease's first one (the previous page's). A consumer reads its
	// next page only after the previous page's handlers ran, so the read
	// that returned the lease began after it: a client's own deadline for
	// the lease (its read's start plus the lease) is no earlier than this
	// plus the lease, while the server's expiry can be later by the read's
	// whole latency (seconds under machine load).
	readAfter map[int64]int64
	lastD     map[string][2]int64 // consumer → (lease, nanos) of its last D line so far
	overruns  int                 // O lines
	stops     int                 // P lines
}

// addNotAcked records why message msg (0: every message) of lease was not
// acked.
func (rs *records) addNotAcked(lease, msg int64, n notAcked) {
	if rs.notAcked[lease] == nil {
		rs.notAcked[lease] = map[int64]notAcked{}
	}
	rs.notAcked[lease][msg] = n
}

// notAcked is one F (or K) line: why a handled message was not acked, when
// the worker found out (unix nanos; 0: not judged) and the error it met.
type notAcked struct {
	reason string
	at     int64
	cause  string
}

func readRecords(dir string) (*records, error) {
	rs := &records{txns: map[string]*txnRec{}, acks: map[int64]string{}, ackSent: map[int64]int64{},
		meta: map[string]msgMeta{}, notAcked: map[int64]map[int64]notAcked{}, killedAt: map[string]int64{},
		readAfter: map[int64]int64{}, lastD: map[string][2]int64{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.rec"))
	if err != nil {
		return nil, err
	}
	for _, name := range files {
		if err := rs.readFile(name); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

func (rs *records) readFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), "\t")
		bad := func() { rs.torn++ }
		switch {
		case fs[0] == "B" && len(fs) == 4:
			n, err := strconv.Atoi(fs[3])
			if err != nil {
				bad()
				continue
			}
			rs.txns[fs[1]] = &txnRec{topic: fs[2], n: n}
		case (fs[0] == "C" || fs[0] == "R" || fs[0] == "U") && len(fs) >= 2:
			if t := rs.txns[fs[1]]; t != nil {
				t.outcome = fs[0][0]
				if t.outcome == 'C' && len(fs) == 3 {
					t.at, _ = strconv.ParseInt(fs[2], 10, 64)
				}
			} else {
				bad()
			}
		case fs[0] == "D" && (len(fs) == 8 || len(fs) == 9):
			id, e1 := strconv.ParseInt(fs[3], 10, 64)
			att, e2 := strconv.Atoi(fs[5])
			lease, e3 := strconv.ParseInt(fs[6], 10, 64)
			var at int64
			var e4 error
			if len(fs) == 9 {
				at, e4 = strconv.ParseInt(fs[8], 10, 64)
			}
			if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
				bad()
				continue
			}
			rs.deliveries = append(rs.deliveries, delivery{group: fs[1], topic: fs[2], msgID: id, key: fs[4],
				attempt: att, leaseID: lease, consumer: fs[7], at: at, seq: len(rs.deliveries)})
			if prev, ok := rs.lastD[fs[7]]; ok && prev[0] != lease && prev[1] > 0 && at > 0 {
				if _, seen := rs.readAfter[lease]; !seen {
					rs.readAfter[lease] = prev[1]
				}
			}
			rs.lastD[fs[7]] = [2]int64{lease, at}
		case fs[0] == "M" && len(fs) == 8:
			n, e1 := strconv.ParseInt(fs[5], 10, 64)
			due, e2 := strconv.ParseInt(fs[6], 10, 64)
			prio, e3 := strconv.Atoi(fs[7])
			if e1 != nil || e2 != nil || e3 != nil {
				bad()
				continue
			}
			m := msgMeta{ident: fs[3], order: fs[4], n: n, due: due, prio: prio}
			if m.ident == "-" {
				m.ident = ""
			}
			if m.order == "-" {
				m.order = ""
			}
			rs.meta[fs[1]+"."+fs[2]] = m
		case fs[0] == "T" && len(fs) == 3:
			lease, e1 := strconv.ParseInt(fs[1], 10, 64)
			at, e2 := strconv.ParseInt(fs[2], 10, 64)
			if e1 != nil || e2 != nil {
				bad()
				continue
			}
			if old, ok := rs.ackSent[lease]; !ok || at < old {
				rs.ackSent[lease] = at
			}
		case fs[0] == "A" && len(fs) == 3:
			lease, err := strconv.ParseInt(fs[1], 10, 64)
			if err != nil {
				bad()
				continue
			}
			outcome, late := strings.CutSuffix(fs[2], " late")
			rs.acks[lease] = outcome
			if late {
				rs.lateAcks++
				if outcome == "ok" {
					rs.lateAcksOK++
				}
			}
		case fs[0] == "K":
			rs.selfKills++
			if len(fs) == 3 {
				if lease, err := strconv.ParseInt(fs[2], 10, 64); err == nil {
					rs.addNotAcked(lease, 0, notAcked{reason: "killed mid-page"})
				}
			}
		case fs[0] == "S" && len(fs) == 2:
			rs.timeline = true
		case fs[0] == "X" && len(fs) == 3:
			at, err := strconv.ParseInt(fs[2], 10, 64)
			if err != nil {
				bad()
				continue
			}
			rs.killedAt[fs[1]] = max(rs.killedAt[fs[1]], at)
		case fs[0] == "O" && len(fs) == 4:
			rs.overruns++
		case fs[0] == "P" && len(fs) == 3:
			rs.stops++
		case fs[0] == "F" && len(fs) >= 5:
			lease, e1 := strconv.ParseInt(fs[1], 10, 64)
			msg, e2 := strconv.ParseInt(fs[2], 10, 64)
			at, e3 := strconv.ParseInt(fs[4], 10, 64)
			if e1 != nil || e2 != nil || e3 != nil {
				bad()
				continue
			}
			n := notAcked{reason: fs[3], at: at}
			if len(fs) > 5 {
				n.cause = fs[5]
			}
			rs.addNotAcked(lease, msg, n)
		default:
			bad()
		}
	}
	return sc.Err()
}
