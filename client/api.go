package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The functions below are the SQL API one call each, for code that runs its
// own loop (the Consumer uses the same statements). They run on any DB: a
// pool, a connection or a transaction (an ack inside the caller's business
// transaction commits or rolls back with it).

// ReadOptions are the parameters of fanout.read besides the topic. Zero
// values mean the server's defaults.
type ReadOptions struct {
	Group       string        // the consumer group (required on pubsub topics)
	Consumer    string        // this member's name ("" = NULL: the server's default)
	MaxMessages int           // page size, 1..10000 (default 100)
	Lease       time.Duration // how long the page is reserved (default 30 s)
	MaxBytes    int64         // page size in bytes (default 16 MiB)
	// Partition reads that key partition of a partitioned topic (explicit
	// assignment); nil means automatic assignment.
	Partition *int
	// Ack is the lease of the caller's previous page of this topic and
	// group, acked by the same statement before the read (one round trip
	// and one commit per page); 0 means none. If that ack fails, nothing
	// is acked or read.
	Ack int64
}

// Read claims one page of topic (fanout.read) and returns its messages, all
// under one lease (Delivery.LeaseID); none when there is nothing to hand
// out.
func Read(ctx context.Context, db DB, topic string, o ReadOptions) ([]Delivery, error) {
	maxMessages, lease, maxBytes, partition, ack := any(nil), any(nil), any(nil), any(nil), any(nil)
	if o.MaxMessages != 0 {
		maxMessages = o.MaxMessages
	} else {
		maxMessages = DefaultMaxMessages
	}
	if o.Lease != 0 {
		lease = interval(o.Lease)
	} else {
		lease = interval(DefaultLease)
	}
	if o.MaxBytes != 0 {
		maxBytes = o.MaxBytes
	} else {
		maxBytes = int64(DefaultMaxBytes)
	}
	if o.Partition != nil {
		partition = *o.Partition
	}
	if o.Ack != 0 {
		ack = o.Ack
	}
	rows, err := db.Query(ctx, sqlRead, topic, nullText(o.Group), nullText(o.Consumer), maxMessages, lease, maxBytes,
		partition, ack)
	if err != nil {
		return nil, fmt.Errorf("pgq client: read %q: %w", topic, err)
	}
	ds, err := scanDeliveries(rows)
	if err != nil {
		return nil, fmt.Errorf("pgq client: read %q: %w", topic, err)
	}
	return ds, nil
}

// Ack marks messages of a lease as processed (fanout.ack); no messageIDs
// means every message of the lease. It returns how many this call settled
// (acking again settles nothing and is no error).
func Ack(ctx context.Context, db DB, leaseID int64, messageIDs ...int64) (int, error) {
	var n int
	var err error
	if len(messageIDs) == 0 {
		err = db.QueryRow(ctx, sqlAckAll, leaseID).Scan(&n)
	} else {
		err = db.QueryRow(ctx, sqlAckIDs, leaseID, messageIDs).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("pgq client: ack of lease %d: %w", leaseID, err)
	}
	return n, nil
}

// ExponentialBackoff as Nack's retryIn asks for the server's exponential
// backoff (1 s, 2 s, 4 s, ... capped at 15 minutes).
const ExponentialBackoff time.Duration = -1

// Nack gives messages of a lease back for redelivery to the same group
// (fanout.nack) after retryIn (0: as soon as possible; ExponentialBackoff:
// the server's backoff); nil messageIDs means every message of the lease.
// reason is recorded as the last error ("" = none; at most 8192
// characters). A message out of attempts goes to the dead letters. It
// returns how many messages this call settled.
func Nack(ctx context.Context, db DB, leaseID int64, messageIDs []int64, retryIn time.Duration, reason string) (int, error) {
	var retry, ids any
	if retryIn >= 0 {
		retry = interval(retryIn)
	}
	if messageIDs != nil {
		ids = messageIDs
	}
	var n int
	if err := db.QueryRow(ctx, sqlNack, leaseID, ids, retry, nullText(reason)).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgq client: nack of lease %d: %w", leaseID, err)
	}
	return n, nil
}

// ExtendLease keeps a lease's messages for by longer (fanout.extend_lease)
// and returns the new expiry. PGQ11 (IsFenced) says the messages went to
// another consumer meanwhile.
func ExtendLease(ctx context.Context, db DB, leaseID int64, by time.Duration) (time.Time, error) {
	var until time.Time
	if err := db.QueryRow(ctx, sqlExtend, leaseID, interval(by)).Scan(&until); err != nil {
		return time.Time{}, fmt.Errorf("pgq client: extend_lease of lease %d: %w", leaseID, err)
	}
	return until, nil
}

// Heartbeat tells pgq that consumer of group is alive (fanout.heartbeat)
// and returns the group's status ("active", "paused", "cancelled", ...).
func Heartbeat(ctx context.Context, db DB, topic, group, consumer string) (string, error) {
	var status string
	if err := db.QueryRow(ctx, sqlHeart, topic, nullText(group), nullText(consumer)).Scan(&status); err != nil {
		return "", fmt.Errorf("pgq client: heartbeat %q: %w", topic, err)
	}
	return status, nil
}

const sqlPartitionOf = `SELECT fanout.partition_of(topic => $1::text, message_group => $2::text)`

// PartitionOf returns the key partition that messageGroup maps to on a
// partitioned topic (fanout.partition_of).
func PartitionOf(ctx context.Context, db DB, topic, messageGroup string) (int, error) {
	var p int
	if err := db.QueryRow(ctx, sqlPartitionOf, topic, messageGroup).Scan(&p); err != nil {
		return 0, fmt.Errorf("pgq client: partition_of %q: %w", topic, err)
	}
	return p, nil
}

const sqlCaptureRows = `SELECT row_no, image FROM fanout.capture_rows(topic => $1::text, message_id => $2::bigint,
	side => $3::text, after => $4::bigint, max_rows => $5::int)`

// CapturedRow is one row image of a statement capture's claim-check.
type CapturedRow struct {
	RowNo int64           // position in its side, from 1
	Image json.RawMessage // the row as a JSON object
}

// CaptureRows returns one page of a statement-shaped capture message's
// claim-check (fanout.capture_rows): the rows of side ("inserted" or
// "deleted") numbered after after, at most maxRows (1..10000). Page on
// with after = the last RowNo until the message's claim_check count.
func CaptureRows(ctx context.Context, db DB, topic string, messageID int64, side string, after int64, maxRows int) ([]CapturedRow, error) {
	rows, err := db.Query(ctx, sqlCaptureRows, topic, messageID, side, after, maxRows)
	if err != nil {
		return nil, fmt.Errorf("pgq client: capture_rows %q %d: %w", topic, messageID, err)
	}
	defer rows.Close()
	var out []CapturedRow
	for rows.Next() {
		var r CapturedRow
		if err := rows.Scan(&r.RowNo, &r.Image); err != nil {
			return nil, fmt.Errorf("pgq client: capture_rows %q %d: %w", topic, messageID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgq client: capture_rows %q %d: %w", topic, messageID, err)
	}
	return out, nil
}

func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

const sqlVersion = `SELECT fanout.version()`

// SchemaVersion returns the pgq version whose SQL is installed
// (fanout.version()).
func SchemaVersion(ctx context.Context, db DB) (string, error) {
	var v string
	if err := db.QueryRow(ctx, sqlVersion).Scan(&v); err != nil {
		return "", fmt.Errorf("pgq client: version: %w", err)
	}
	return v, nil
}
