package shards

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// shardSQL is what a shard needs for moves, in schema fanout_shard (not
// fanout: its migrations are untouched): seal(topic, to) makes every later
// insert into the topic's message table fail with PGQ26 (a statement
// trigger: nothing for topics that never moved), after waiting for the
// inserts in flight (CREATE TRIGGER's lock); unseal(topic) undoes it (a
// topic moved back).
const shardSQL = `
CREATE SCHEMA IF NOT EXISTS fanout_shard;
REVOKE ALL ON SCHEMA fanout_shard FROM PUBLIC;
GRANT USAGE ON SCHEMA fanout_shard TO fanout_producer, fanout_consumer, fanout_admin;

-- fanout_shard.moved(): trigger of a moved topic's message table.
-- Raises: PGQ26 (TG_ARGV: the topic, its new shard).
CREATE OR REPLACE FUNCTION fanout_shard.moved()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    RAISE EXCEPTION 'topic % moved to shard %', quote_literal(TG_ARGV[0]), TG_ARGV[1]
        USING ERRCODE = 'PGQ26', HINT = 're-read the directory (fanout_directory.shard_for) and call the shard it names';
END
$fn$;

-- fanout_shard.seal(topic, to_shard): the topic's message table refuses
-- inserts from now on (waits for those in flight). Returns the table.
-- Tables: fanout.topic, fanout_data.m<id> (trigger).
CREATE OR REPLACE FUNCTION fanout_shard.seal(p_topic text, p_to text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_table text;
BEGIN
    SELECT t.data_table INTO v_table FROM fanout.topic t WHERE t.topic = p_topic;
    IF v_table IS NULL THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal(p_topic) USING ERRCODE = 'PGQ01';
    END IF;
    EXECUTE format('DROP TRIGGER IF EXISTS pgq_moved ON fanout_data.%I', v_table);
    EXECUTE format('CREATE TRIGGER pgq_moved BEFORE INSERT ON fanout_data.%I FOR EACH STATEMENT '
                   'EXECUTE FUNCTION fanout_shard.moved(%L, %L)', v_table, p_topic, p_to);
    RETURN v_table;
END
$fn$;

-- fanout_shard.unseal(topic): the topic takes inserts again.
-- Tables: fanout.topic, fanout_data.m<id> (trigger).
CREATE OR REPLACE FUNCTION fanout_shard.unseal(p_topic text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_table text;
BEGIN
    SELECT t.data_table INTO v_table FROM fanout.topic t WHERE t.topic = p_topic;
    IF v_table IS NOT NULL THEN
        EXECUTE format('DROP TRIGGER IF EXISTS pgq_moved ON fanout_data.%I', v_table);
    END IF;
END
$fn$;
REVOKE EXECUTE ON FUNCTION fanout_shard.seal(text, text), fanout_shard.unseal(text) FROM PUBLIC;
`

// ErrStillDraining says that a group still has messages of the moved topic
// on its previous shard.
var ErrStillDraining = errors.New("the topic's previous shard still holds messages a group needs")

type shardInfo struct {
	name, conninfo string
}

func shardOf(ctx context.Context, dir Querier, topic string) (shardInfo, error) {
	var s shardInfo
	err := dir.QueryRow(ctx, `SELECT shard, conninfo FROM fanout_directory.shard_for($1)`, topic).Scan(&s.name, &s.conninfo)
	return s, err
}

func conninfoOf(ctx context.Context, dir Querier, shard string) (string, error) {
	var c string
	err := dir.QueryRow(ctx, `SELECT conninfo FROM fanout_directory.shard WHERE shard = $1`, shard).Scan(&c)
	return c, err
}

// Move moves topic to shard to, with traffic running (drain-and-switch,
// docs/scaling-out.md): it creates the topic on the new shard with the old
// one's settings and groups, places it there in the directory (clients
// publish there once they see the new version, and read the old shard
// first while it drains), then seals the old shard's topic: from then on a
// publish there (a client with a stale directory) fails with PGQ26, which
// makes the client re-read the directory. Then FinishMove, called until it
// reports true, ends the move once every group has drained the old shard.
//
// Every step repeats safely: a Move that died (its process or a connection
// killed, a shard down) is completed by running Move again, or by
// FinishMove, which seals the old shard itself when the seal is missing.
// Key partitions (create_topic's partitions) and dedupe keys are not
// carried over: a dedupe key repeated across the move publishes again.
func Move(ctx context.Context, dir Querier, topic, to string) error {
	from, err := shardOf(ctx, dir, topic)
	if err != nil {
		return fmt.Errorf("move %q: %w", topic, err)
	}
	if from.name == to {
		// Placed there already: a move that died after switching the
		// directory (before or while sealing) resumes with the seal.
		return resumeSeal(ctx, dir, topic, to)
	}
	toInfo, err := conninfoOf(ctx, dir, to)
	if err != nil {
		return fmt.Errorf("move %q: shard %q: %w", topic, to, err)
	}
	old, err := pgx.Connect(ctx, from.conninfo)
	if err != nil {
		return fmt.Errorf("move %q: connect to %q: %w", topic, from.name, err)
	}
	defer old.Close(context.WithoutCancel(ctx))
	var settings []byte
	if err := old.QueryRow(ctx, `SELECT to_jsonb(t) FROM fanout.topics t WHERE t.topic = $1`, topic).Scan(&settings); err != nil {
		return fmt.Errorf("move %q: its settings on %q: %w", topic, from.name, err)
	}
	rows, err := old.Query(ctx, `SELECT group_name FROM fanout.groups
		WHERE topic = $1 AND group_name IS NOT NULL AND status <> 'cancelled' ORDER BY group_name`, topic)
	if err != nil {
		return fmt.Errorf("move %q: its groups on %q: %w", topic, from.name, err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("move %q: its groups on %q: %w", topic, from.name, err)
	}

	nw, err := pgx.Connect(ctx, toInfo)
	if err != nil {
		return fmt.Errorf("move %q: connect to %q: %w", topic, to, err)
	}
	defer nw.Close(context.WithoutCancel(ctx))
	if _, err := nw.Exec(ctx, shardSQL); err != nil {
		return fmt.Errorf("move %q: install fanout_shard on %q: %w", topic, to, err)
	}
	if _, err := nw.Exec(ctx, `SELECT fanout.create_topic(topic => $1::text,
		semantics => $2::jsonb->>'semantics', completion => $2::jsonb->>'completion',
		retention => ($2::jsonb->>'retention')::interval,
		zero_subscription_retention => ($2::jsonb->>'zero_subscription_retention')::interval,
		block_writes_without_subscriptions => ($2::jsonb->>'block_writes_without_subscriptions')::boolean,
		max_retention => ($2::jsonb->>'max_retention')::interval, max_attempts => ($2::jsonb->>'max_attempts')::int,
		max_payload_bytes => ($2::jsonb->>'max_payload_bytes')::int, zombie_ttl => ($2::jsonb->>'zombie_ttl')::interval,
		notify => ($2::jsonb->>'notify')::boolean, partition_interval => ($2::jsonb->>'partition_interval')::interval,
		dedupe_window => ($2::jsonb->>'dedupe_window')::interval,
		sequence_ordering => ($2::jsonb->>'sequence_ordering')::boolean,
		gap_alert_after => ($2::jsonb->>'gap_alert_after')::interval)`, topic, string(settings)); err != nil {
		return fmt.Errorf("move %q: create it on %q: %w", topic, to, err)
	}
	if _, err := nw.Exec(ctx, `SELECT fanout_shard.unseal($1)`, topic); err != nil {
		return fmt.Errorf("move %q: unseal it on %q: %w", topic, to, err)
	}
	for _, g := range groups {
		if _, err := nw.Exec(ctx, `SELECT fanout.subscribe($1, $2)`, topic, g); err != nil {
			return fmt.Errorf("move %q: subscribe %q on %q: %w", topic, g, to, err)
		}
	}
	if err := dir.QueryRow(ctx, `SELECT fanout_directory.move($1, $2)`, topic, to).Scan(new(*string)); err != nil {
		return fmt.Errorf("move %q: directory: %w", topic, err)
	}
	if err := seal(ctx, old, topic, to); err != nil {
		return fmt.Errorf("move %q: %w on %q", topic, err, from.name)
	}
	return nil
}

// seal installs fanout_shard on the old shard and seals topic there (both
// repeatable: a second seal replaces the first's trigger).
func seal(ctx context.Context, old *pgx.Conn, topic, to string) error {
	if _, err := old.Exec(ctx, shardSQL); err != nil {
		return fmt.Errorf("install fanout_shard: %w", err)
	}
	if _, err := old.Exec(ctx, `SELECT fanout_shard.seal($1, $2)`, topic, to); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	return nil
}

// resumeSeal seals topic on the shard the directory says it still drains
// on (nothing when it drains nowhere: the move was over, or never began).
func resumeSeal(ctx context.Context, dir Querier, topic, to string) error {
	var from, conninfo string
	err := dir.QueryRow(ctx, `SELECT d.from_shard, s.conninfo FROM fanout_directory.draining d
		JOIN fanout_directory.shard s ON s.shard = d.from_shard WHERE d.topic = $1`, topic).Scan(&from, &conninfo)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("move %q: directory: %w", topic, err)
	}
	old, err := pgx.Connect(ctx, conninfo)
	if err != nil {
		return fmt.Errorf("move %q: connect to %q: %w", topic, from, err)
	}
	defer old.Close(context.WithoutCancel(ctx))
	if err := seal(ctx, old, topic, to); err != nil {
		return fmt.Errorf("move %q: %w on %q", topic, err, from)
	}
	return nil
}

// FinishMove ends the move of topic when every group of it has drained its
// previous shard (nothing unread, leased, expired or waiting for a retry
// there) and reports whether it did; false while a group still needs the
// old shard (call it again later).
func FinishMove(ctx context.Context, dir Querier, topic string) (bool, error) {
	var from, conninfo string
	err := dir.QueryRow(ctx, `SELECT d.from_shard, s.conninfo FROM fanout_directory.draining d
		JOIN fanout_directory.shard s ON s.shard = d.from_shard WHERE d.topic = $1`, topic).Scan(&from, &conninfo)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("finish move of %q: %w", topic, err)
	}
	old, err := pgx.Connect(ctx, conninfo)
	if err != nil {
		return false, fmt.Errorf("finish move of %q: connect to %q: %w", topic, from, err)
	}
	defer old.Close(context.WithoutCancel(ctx))
	var sealed bool
	var left int64
	if err := old.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace JOIN fanout.topic t ON t.data_table = c.relname
			WHERE n.nspname = 'fanout_data' AND g.tgname = 'pgq_moved' AND t.topic = $1),
		coalesce((SELECT sum(lag_messages + in_flight + expired + retry_pending) FROM fanout.groups
			WHERE topic = $1 AND status <> 'cancelled'), 0)::bigint`, topic).Scan(&sealed, &left); err != nil {
		return false, fmt.Errorf("finish move of %q: %w", topic, err)
	}
	if !sealed {
		// The move died before its seal: seal now (what running move
		// again does); groups may still get messages published there
		// before it, so this round does not end the move.
		to, err := shardOf(ctx, dir, topic)
		if err != nil {
			return false, fmt.Errorf("finish move of %q: %w", topic, err)
		}
		if err := seal(ctx, old, topic, to.name); err != nil {
			return false, fmt.Errorf("finish move of %q: %w on %q", topic, err, from)
		}
		return false, nil
	}
	if left > 0 {
		return false, nil
	}
	if err := dir.QueryRow(ctx, `SELECT fanout_directory.drained($1)`, topic).Scan(new(bool)); err != nil {
		return false, fmt.Errorf("finish move of %q: directory: %w", topic, err)
	}
	return true, nil
}
