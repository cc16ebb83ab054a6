#!/usr/bin/env bash
# e2e_psql.sh — the README walkthrough in plain psql against a fresh database
# migrated by the pgq-scheduler binary: proof that pgq needs no Go (or any
# client library) to be used. Every check is a boolean the script asserts.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must point at a PostgreSQL server (make test sets it)}"
db="pgq_e2e_$$"
base=${DATABASE_URL%%\?*}
base=${base%/*}
query=""
case "$DATABASE_URL" in *\?*) query="?${DATABASE_URL#*\?}" ;; esac
url="$base/$db$query"

psql -qX "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
trap 'psql -qX "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
bin/pgq-scheduler migrate --database-url "$url" >/dev/null

fail=0
check() { # check NAME SQL -> SQL must print t
  local got
  got=$(PGOPTIONS="-c client_min_messages=warning" psql -qXAt -v ON_ERROR_STOP=1 "$url" -c "$2" 2>&1) || true
  if [ "$got" = "t" ]; then echo "ok   $1"; else echo "FAIL $1: $got"; fail=1; fi
}

# Pub/sub (the README walkthrough): two groups each get every message.
check "create pubsub topic" "SELECT fanout.create_topic('orders.events', semantics => 'pubsub') > 0"
check "subscribe email (latest)" "SELECT status = 'active' FROM fanout.subscribe('orders.events', 'email')"
check "subscribe analytics (earliest)" \
  "SELECT status = 'active' FROM fanout.subscribe('orders.events', 'analytics', start_position => 'earliest')"
check "publish" "SELECT fanout.publish('orders.events', '{\"order\": 1, \"total\": 42.50}') > 0"
check "publish_batch keeps input order" \
  "SELECT array_agg(id ORDER BY ord) = array_agg(id ORDER BY id)
     FROM fanout.publish_batch('orders.events', ARRAY['{\"order\": 2}', '{\"order\": 3}']::jsonb[]) WITH ORDINALITY AS p(id, ord)"
check "email reads all three" \
  "SELECT count(*) = 3 FROM fanout.read('orders.events', 'email', 'email-worker-1', max_messages => 10)"
check "email acks its lease" \
  "SELECT fanout.ack(max(l.lease_id)) = 3 FROM fanout.lease l JOIN fanout.consumer_group g USING (group_id) WHERE g.group_name = 'email'"
check "analytics gets its own copy" \
  "SELECT count(*) = 2 FROM fanout.read('orders.events', 'analytics', 'etl-1', max_messages => 2)"
check "analytics acks one, nacks one" \
  "SELECT fanout.ack(l.lease_id, ARRAY[l.msg_ids[2]]) = 1 AND fanout.nack(l.lease_id, ARRAY[l.msg_ids[1]], retry_in => '5 seconds', error => 'warehouse down') = 1
     FROM fanout.lease l JOIN fanout.consumer_group g USING (group_id) WHERE g.group_name = 'analytics'"
check "groups view" \
  "SELECT bool_and(CASE group_name WHEN 'email' THEN lag_messages = 0 AND in_flight = 0
                                   ELSE lag_messages = 1 AND retry_pending = 1 END) FROM fanout.groups WHERE topic = 'orders.events'"
check "message_status" \
  "SELECT bool_and(CASE group_name WHEN 'email' THEN status = 'acked' ELSE status = 'retry' END)
     FROM fanout.message_status('orders.events', 1)"

# Queue topic: publish, read, ack.
check "create queue topic" "SELECT fanout.create_topic('orders.tasks') > 0"
check "publish" "SELECT fanout.publish('orders.tasks', '{\"order\":1}') > 0"
check "read gives the message" \
  "SELECT count(*) = 1 AND bool_and(payload = '{\"order\":1}' AND attempt = 1)
     FROM fanout.read('orders.tasks', consumer => 'w1', max_messages => 10, lease => '30 s')"
check "ack the lease" "SELECT fanout.ack((SELECT max(lease_id) FROM fanout.lease)) = 1"
check "nothing left" "SELECT count(*) = 0 FROM fanout.read('orders.tasks', consumer => 'w1')"

# Nack until dead letter, then replay.
check "topic with max_attempts 2" "SELECT fanout.create_topic('orders.retry', max_attempts => 2) > 0"
check "publish" "SELECT fanout.publish('orders.retry', '{\"order\":2}') > 0"
check "nack attempt 1" \
  "SELECT fanout.nack(lease_id, error => 'boom 1') = 1 FROM fanout.read('orders.retry', consumer => 'w1')"
check "nack attempt 2 dead-letters" \
  "SELECT fanout.nack(lease_id, error => 'boom 2') = 1 FROM fanout.read('orders.retry', consumer => 'w1')"
check "dead letter visible" \
  "SELECT count(*) = 1 AND bool_and(last_error = 'boom 2' AND attempts = 2) FROM fanout.dead_letters WHERE topic = 'orders.retry'"
check "replay" \
  "SELECT fanout.replay_dead_letters('orders.retry', NULL, ARRAY(SELECT message_id FROM fanout.dead_letters WHERE topic = 'orders.retry')) = 1"
check "replayed message readable" "SELECT count(*) = 1 FROM fanout.read('orders.retry', consumer => 'w1')"

# Inbox (the README section): idempotent receipt, delayed delivery, replay.
check "create inbox topic" "SELECT fanout.create_topic('payments.inbox') > 0"
check "a repeated dedupe key returns the first id" \
  "SELECT fanout.publish('payments.inbox', '{\"amount\":10}', dedupe_key => 'evt-8f2c')
        = fanout.publish('payments.inbox', '{\"amount\":10}', dedupe_key => 'evt-8f2c')"
check "publish a delayed message" \
  "SELECT fanout.publish('payments.inbox', '{\"remind\":true}', delay => '10 minutes') > 0"
check "it is scheduled" "SELECT scheduled = 1 FROM fanout.topics WHERE topic = 'payments.inbox'"
check "read gets the payment once, not the reminder" \
  "SELECT count(*) = 1 AND bool_and(payload = '{\"amount\":10}') FROM fanout.read('payments.inbox', consumer => 'w1')"
check "ack it" "SELECT fanout.ack((SELECT max(lease_id) FROM fanout.lease)) = 1"
check "replay it by id" \
  "SELECT fanout.replay('payments.inbox', NULL, ARRAY[fanout.publish('payments.inbox', '{\"amount\":10}', dedupe_key => 'evt-8f2c')]) = 1"
check "replayed payment readable" "SELECT count(*) = 1 FROM fanout.read('payments.inbox', consumer => 'w1')"

# Inbox, priority: the higher priority first.
check "create jobs topic" "SELECT fanout.create_topic('jobs') > 0"
check "publish priority 0 then 9" \
  "SELECT fanout.publish('jobs', '{\"k\":\"report\"}') < fanout.publish('jobs', '{\"k\":\"password-reset\"}', priority => 9)"
check "read hands out priority 9 first" \
  "SELECT payload = '{\"k\":\"password-reset\"}' FROM fanout.read('jobs', consumer => 'w1', max_messages => 1)"

# Inbox, ordered processing: sequences per aggregate, a gap, its release.
ack_last="SELECT fanout.ack((SELECT max(lease_id) FROM fanout.lease)) = 1"
check "create ledger topic" \
  "SELECT fanout.create_topic('ledger.inbox', sequence_ordering => true, gap_alert_after => '5 minutes') > 0"
check "publish sequences 2, 1, 4" \
  "SELECT fanout.publish('ledger.inbox', '{\"op\":\"credit\"}', message_group => 'account-7', sequence => 2)
        < fanout.publish('ledger.inbox', '{\"op\":\"open\"}', message_group => 'account-7', sequence => 1)
     AND fanout.publish('ledger.inbox', '{\"op\":\"close\"}', message_group => 'account-7', sequence => 4) > 0"
check "read hands out sequence 1 only" \
  "SELECT array_agg(payload->>'op') = '{open}' FROM fanout.read('ledger.inbox', consumer => 'w1')"
check "ack it" "$ack_last"
check "then sequence 2" "SELECT array_agg(payload->>'op') = '{credit}' FROM fanout.read('ledger.inbox', consumer => 'w1')"
check "ack it" "$ack_last"
check "3 is missing" "SELECT count(*) = 0 FROM fanout.read('ledger.inbox', consumer => 'w1')"
check "sequence_gaps shows it with its waiter" \
  "SELECT (missing_from, missing_to, waiting_messages) = (3, 3, 1) FROM fanout.sequence_gaps
     WHERE topic = 'ledger.inbox' AND message_group = 'account-7'"
check "publish the missing one" \
  "SELECT fanout.publish('ledger.inbox', '{\"op\":\"debit\"}', message_group => 'account-7', sequence => 3) > 0"
check "then sequence 3" "SELECT array_agg(payload->>'op') = '{debit}' FROM fanout.read('ledger.inbox', consumer => 'w1')"
check "ack it" "$ack_last"
check "then sequence 4" "SELECT array_agg(payload->>'op') = '{close}' FROM fanout.read('ledger.inbox', consumer => 'w1')"
check "no gap left" "SELECT count(*) = 0 FROM fanout.sequence_gaps"

# Errors carry documented SQLSTATEs.
check "unknown topic is PGQ01" \
  "DO \$\$ BEGIN PERFORM fanout.publish('nope', '{}'); EXCEPTION WHEN SQLSTATE 'PGQ01' THEN RAISE NOTICE 'ok'; END \$\$; SELECT true"
check "maintenance round runs" "SELECT fanout.run_maintenance() >= 0"
check "topics view" "SELECT count(*) = 6 FROM fanout.topics"

# Ordering (README): a partitioned topic, per-key order, one page per partition.
check "create partitioned topic" \
  "SELECT fanout.create_topic('orders.keyed', semantics => 'pubsub', partitions => 16) > 0"
check "subscribe billing" "SELECT status = 'active' FROM fanout.subscribe('orders.keyed', 'billing')"
check "publish keyed" \
  "SELECT count(fanout.publish('orders.keyed', jsonb_build_object('n', i), message_group => 'order-42')) = 3 FROM generate_series(1, 3) i"
check "partition_of is the documented hash" "SELECT fanout.partition_of('orders.keyed', 'order-42') = 12"
check "a member reads the key in order" \
  "SELECT array_agg((payload->>'n')::int ORDER BY message_id) = '{1,2}' FROM fanout.read('orders.keyed', 'billing', 'worker-7', max_messages => 2)"
check "the next page waits for the first" "SELECT count(*) = 0 FROM fanout.read('orders.keyed', 'billing', 'worker-7')"
check "partitions view: owner, generation, in flight" \
  "SELECT owner = 'worker-7' AND generation >= 1 AND in_flight = 2 AND lag_messages = 1
     FROM fanout.partitions WHERE topic = 'orders.keyed' AND group_name = 'billing' AND partition = 12"

if [ $fail = 0 ]; then echo "e2e_psql: all checks passed"; else echo "e2e_psql: FAILED"; exit 1; fi
