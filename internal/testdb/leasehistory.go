package testdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// KeepLeaseHistory makes the pages of fanout.lease auditable after the fact.
// A lease slot is reused page after page (fanout._lease_open), so the table
// holds only each slot's current page; audits of every page ever handed out
// (overlaps, exactly-once settles, the chaos verdict) read the view
// <schema>.lease_all instead: the current pages plus every earlier page of a
// slot, copied into <schema>.lease_log by a trigger when the slot moves to
// its next page or is deleted. Test and harness databases only: the trigger
// changes nothing the product does (it only copies old row versions).
// A page settled in full by its holder keeps settled empty
// (fanout._lease_settle); the view lists its msg_ids there, as settled. A
// slot moves on from an open page only when read(..., ack =>) acked that
// page in full in the same update (fanout._lease_open, p_settling): the
// log records it settled.
func KeepLeaseHistory(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	_, err := db.Exec(ctx, fmt.Sprintf(`
		CREATE SCHEMA IF NOT EXISTS %[1]s;
		CREATE TABLE %[1]s.lease_log (LIKE fanout.lease);
		CREATE FUNCTION %[1]s.lease_log() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
		SET search_path = pg_catalog AS $fn$
		DECLARE
		    r fanout.lease := OLD;
		BEGIN
		    IF TG_OP = 'UPDATE' AND r.open_count > 0 THEN
		        -- read(..., ack =>) settles its previous page and puts the
		        -- next one into the slot with one update (fanout._lease_open,
		        -- p_settling): the page was settled in full by its holder.
		        r.settled := '{}';
		        r.open_count := 0;
		        r.closed_at := NEW.created_at;
		    END IF;
		    INSERT INTO %[1]s.lease_log SELECT r.*;
		    RETURN NULL;
		END
		$fn$;
		CREATE TRIGGER zz_lease_log_next AFTER UPDATE ON fanout.lease FOR EACH ROW
		    WHEN (OLD.page_no IS DISTINCT FROM NEW.page_no) EXECUTE FUNCTION %[1]s.lease_log();
		CREATE TRIGGER zz_lease_log_delete AFTER DELETE ON fanout.lease FOR EACH ROW
		    EXECUTE FUNCTION %[1]s.lease_log();
		CREATE VIEW %[1]s.lease_all AS
		    SELECT l.slot_id, l.group_id, l.page_no, l.lease_id, l.consumer, l.created_at, l.expires_at,
		           l.msg_ids, l.msg_txids, l.attempts,
		           CASE WHEN l.open_count = 0 AND l.reclaimed = '{}' AND l.settled = '{}' THEN l.msg_ids
		                ELSE l.settled END AS settled,
		           l.reclaimed, l.open_count, l.min_id, l.closed_at, l.kpart, l.generation
		    FROM (SELECT * FROM fanout.lease UNION ALL SELECT * FROM %[1]s.lease_log) l;
		GRANT USAGE ON SCHEMA %[1]s TO PUBLIC;
		GRANT SELECT ON %[1]s.lease_all, %[1]s.lease_log TO PUBLIC`, s))
	if err != nil {
		return fmt.Errorf("lease history in schema %s: %w", schema, err)
	}
	return nil
}
