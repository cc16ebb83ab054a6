#!/usr/bin/env python3
"""pgq from Python with psycopg 3: a producer and a consumer loop.

    python3 pgq_example.py --url postgres://... --count 50

Creates a pubsub topic and a consumer group (both idempotent), starts a
consumer that LISTENs on the topic's channel (and polls once a second as a
fallback), publishes --count messages, and stops once all of them were
processed. Each message is processed in a business transaction that also
acks it: the work and the ack commit together. An ack that pgq fences
(SQLSTATE PGQ11: the lease expired and another member took the message)
rolls the business transaction back. Exit status 0 when every message
arrived exactly once.

Across a failover (docs/ha.md): pass a multi-host URL with
target_session_attrs=read-write (postgres://h1,h2,h3/db?target_session_attrs=read-write).
The errors of a failover (must_reconnect: 25006, 57P01, 57P02, 57P03, class
08, a lost connection) discard the connection and connect again; the
consumer then LISTENs again and polls once (NOTIFY is not replicated). A
publish whose COMMIT may or may not have happened (the connection was lost)
is retried with the same dedupe_key, which returns the first message's id
if it did commit. Never cancel a COMMIT (no conn.cancel(), no statement
timeout around it): a COMMIT waiting for a synchronous standby that is
cancelled returns OK although no standby has it.
"""
import argparse
import os
import sys
import threading
import time

import psycopg
from psycopg.types.json import Jsonb

FENCED = "PGQ11"  # docs/errors.md
# Errors after which a connection is discarded and made again (docs/ha.md).
RECONNECT_STATES = {"25006", "57P01", "57P02", "57P03"}


def must_reconnect(e):
    """A failover's error: the connection is lost, the server is shutting
    down, or the node is (now) read-only. Connect again: a multi-host URL with
    target_session_attrs=read-write finds the new primary."""
    state = getattr(e, "sqlstate", None)
    if state is None:
        return isinstance(e, psycopg.OperationalError)  # connection lost, no server error
    return state in RECONNECT_STATES or state.startswith("08")


def connect(url, **kw):
    """Connects, retrying a failover's errors for up to a minute."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return psycopg.connect(url, **kw)
        except psycopg.Error as e:
            if not must_reconnect(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def setup(conn, topic, group):
    # notify_when => 'always': this consumer LISTENs without announcing its
    # waits (fanout.wait_begin), so every publish must NOTIFY (docs/wakeups.md).
    conn.execute("SELECT fanout.create_topic(%s, semantics => 'pubsub', notify_when => 'always')", (topic,))
    conn.execute("SELECT fanout.subscribe(%s, %s, start_position => 'earliest')", (topic, group))
    conn.execute("CREATE TABLE IF NOT EXISTS processed"
                 " (topic text, message_id bigint, payload jsonb, PRIMARY KEY (topic, message_id))")
    row = conn.execute("SELECT channel, notify FROM fanout.topics WHERE topic = %s", (topic,)).fetchone()
    return row[0], row[1]


def publish(url, topic, count):
    """The producer: each publish is part of a business transaction, with a
    dedupe_key so that it can be retried when its COMMIT's outcome is
    unknown."""
    ids = []
    run = f"{os.getpid()}-{time.time_ns()}"
    conn = connect(url)
    try:
        for i in range(count):
            while True:
                try:
                    with conn.transaction():
                        # Gotcha: a dict must be wrapped in Jsonb() to be sent as jsonb.
                        (mid,) = conn.execute(
                            "SELECT fanout.publish(%s, %s, headers => %s, dedupe_key => %s)",
                            (topic, Jsonb({"n": i}), Jsonb({"source": "python"}), f"py-{run}-{i}"),
                        ).fetchone()
                    ids.append(mid)
                    break
                except psycopg.Error as e:
                    if not must_reconnect(e):
                        raise
                    # If the connection died during COMMIT, the outcome is
                    # unknown: the retry with the same dedupe_key returns the
                    # first message's id if it did commit.
                    print(f"publish: {e!r}: reconnecting, retrying with the same dedupe_key", file=sys.stderr)
                    conn.close()
                    conn = connect(url)
    finally:
        conn.close()
    return ids


class Consumer:
    def __init__(self, url, topic, group, name, channel, notify):
        self.url, self.topic, self.group, self.name = url, topic, group, name
        self.channel, self.notify = channel, notify
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.notifications = 0
        self.fenced = 0

    def listen(self):
        # A dedicated autocommit connection; notifies() blocks, so it runs in
        # its own (daemon) thread and wakes the consumer loop. After a
        # failover: connect again, LISTEN again, and poll once (wake), as
        # notifications are not replicated.
        while not self.stop.is_set():
            try:
                conn = connect(self.url, autocommit=True)
                conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self.channel)))
                self.listening.set()
                self.wake.set()
                for _ in conn.notifies():
                    self.notifications += 1
                    self.wake.set()
            except psycopg.Error as e:
                if not must_reconnect(e):
                    raise
                time.sleep(0.5)

    def run(self, want):
        self.listening = threading.Event()
        if self.notify:
            threading.Thread(target=self.listen, daemon=True).start()
            self.listening.wait(10)
        done = 0
        conn = connect(self.url, autocommit=True)
        try:
            while done < want and not self.stop.is_set():
                self.wake.clear()
                try:
                    # read in its own short transaction (autocommit)
                    rows = conn.execute(
                        "SELECT lease_id, message_id, payload, attempt"
                        " FROM fanout.read(%s, %s, %s, max_messages => 10)",
                        (self.topic, self.group, self.name),
                    ).fetchall()
                    for lease_id, message_id, payload, attempt in rows:
                        if self.handle(conn, lease_id, message_id, payload):
                            done += 1
                except psycopg.Error as e:
                    if not must_reconnect(e):
                        raise
                    # A failover: what this page did not ack comes back after
                    # its lease; connect again (to the new primary) and read.
                    print(f"consumer: {e!r}: reconnecting", file=sys.stderr)
                    conn.close()
                    conn = connect(self.url, autocommit=True)
                    continue
                if not rows:
                    self.wake.wait(1.0)  # LISTEN, or poll once a second
        finally:
            conn.close()
        return done

    def handle(self, conn, lease_id, message_id, payload):
        """Business write + ack in one transaction; fenced acks roll back."""
        try:
            with conn.transaction():
                conn.execute("INSERT INTO processed VALUES (%s, %s, %s)", (self.topic, message_id, Jsonb(payload)))
                conn.execute("SELECT fanout.ack(%s, %s)", (lease_id, [message_id]))
            return True
        except psycopg.Error as e:
            if e.sqlstate == FENCED:
                # Someone else holds the message now; our insert rolled back.
                self.fenced += 1
                print(f"fenced: {e.diag.message_primary} (hint: {e.diag.message_hint})", file=sys.stderr)
                return False
            raise


def fencing_demo(url, topic, group):
    """A lease that ran out: its ack is fenced with PGQ11 and a hint."""
    with psycopg.connect(url, autocommit=True) as conn:
        publish(url, topic, 1)
        (lease,) = conn.execute(
            "SELECT lease_id FROM fanout.read(%s, %s, 'slow', max_messages => 1, lease => '1 millisecond')",
            (topic, group)).fetchone()
        time.sleep(0.05)
        took = conn.execute("SELECT lease_id, message_id FROM fanout.read(%s, %s, 'fast')", (topic, group)).fetchall()
        try:
            conn.execute("SELECT fanout.ack(%s)", (lease,))
        except psycopg.Error as e:
            assert e.sqlstate == FENCED, e.sqlstate
            assert e.diag.message_hint, "pgq errors carry a hint"
            conn.execute("SELECT fanout.ack(%s)", (took[0][0],))  # the new holder acks
            return True
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("DATABASE_URL"))
    ap.add_argument("--topic", default="py.orders")
    ap.add_argument("--group", default="py-billing")
    ap.add_argument("--count", type=int, default=50)
    args = ap.parse_args()
    if not args.url:
        ap.error("--url or DATABASE_URL is required")

    with psycopg.connect(args.url, autocommit=True) as conn:
        channel, notify = setup(conn, args.topic, args.group)
        before = conn.execute("SELECT count(*) FROM processed WHERE topic = %s", (args.topic,)).fetchone()[0]

    consumer = Consumer(args.url, args.topic, args.group, "py-worker-1", channel, notify)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("done", consumer.run(args.count)))
    t.start()
    ids = publish(args.url, args.topic, args.count)
    t.join(120)
    consumer.stop.set()

    with psycopg.connect(args.url) as conn:
        got = [r[0] for r in conn.execute(
            "SELECT message_id FROM processed WHERE topic = %s AND message_id = ANY(%s) ORDER BY 1",
            (args.topic, ids))]
        total = conn.execute("SELECT count(*) FROM processed WHERE topic = %s", (args.topic,)).fetchone()[0]
    fenced_ok = fencing_demo(args.url, args.topic, args.group)
    print(f"python example: {len(got)} of {len(ids)} messages arrived exactly once "
          f"({consumer.notifications} notifications; fenced ack caught: {fenced_ok})")
    ok = got == sorted(ids) and total - before == len(ids) and consumer.notifications > 0 and fenced_ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
