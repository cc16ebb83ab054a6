#!/usr/bin/env node
// pgq from Node.js with node-postgres (pg): a producer and a consumer loop.
//
//   node example.js --url postgres://... --count 50
//
// Creates a pubsub topic and a consumer group (both idempotent), starts a
// consumer that LISTENs on the topic's channel (and polls once a second as a
// fallback), publishes --count messages, and stops once all of them were
// processed. Each message is processed in a business transaction that also
// acks it: the work and the ack commit together. An ack that pgq fences
// (SQLSTATE PGQ11: the lease expired and another member took the message)
// rolls the business transaction back. Exit status 0 when every message
// arrived exactly once.
//
// Across a failover (docs/ha.md): pass a multi-host URL with
// target_session_attrs=read-write (postgres://h1,h2,h3/db?target_session_attrs=read-write);
// pg itself takes one host, so connect() below tries each host and keeps the
// first one that is not read-only. The errors of a failover (mustReconnect:
// 25006, 57P01, 57P02, 57P03, class 08, a lost connection) discard the
// connection and connect again; the consumer then LISTENs again and polls
// once (NOTIFY is not replicated). A publish whose COMMIT may or may not have
// happened (the connection was lost) is retried with the same dedupe_key,
// which returns the first message's id if it did commit. Never cancel a
// COMMIT (no statement timeout, no query cancel around it): a COMMIT waiting
// for a synchronous standby that is cancelled returns OK although no standby
// has it.
'use strict';

const { Client } = require('pg');

const FENCED = 'PGQ11'; // docs/errors.md

function parseArgs(argv) {
  const args = { url: process.env.DATABASE_URL, topic: 'node.orders', group: 'node-billing', count: 50 };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in args)) throw new Error(`unknown flag ${argv[i]}`);
    args[key] = key === 'count' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!args.url) throw new Error('--url or DATABASE_URL is required');
  return args;
}

// Errors after which a connection is discarded and made again (docs/ha.md).
const RECONNECT_STATES = new Set(['25006', '57P01', '57P02', '57P03']);

function mustReconnect(e) {
  // A server error has a five-character SQLSTATE and a severity; anything
  // else (ECONNRESET, "Connection terminated unexpectedly") is a lost
  // connection.
  if (!e || !e.severity || typeof e.code !== 'string' || e.code.length !== 5) return true;
  return RECONNECT_STATES.has(e.code) || e.code.startsWith('08');
}

// The URL's hosts, each as a single-host URL (pg takes one host), and
// whether only a read-write one will do (target_session_attrs=read-write).
function hostURLs(url) {
  const m = url.match(/^(postgres(?:ql)?:\/\/(?:[^@/]*@)?)([^/?]*)(.*)$/);
  if (!m) return { urls: [url], readWrite: false };
  const readWrite = /[?&]target_session_attrs=read-write\b/.test(m[3]);
  const rest = m[3].replace(/([?&])target_session_attrs=[^&]*&?/, '$1').replace(/[?&]$/, '');
  return { urls: m[2].split(',').map((h) => m[1] + h + rest), readWrite };
}

// Connects to the first host that answers (and, with
// target_session_attrs=read-write, is not read-only), retrying a failover's
// errors for up to a minute.
async function connect(url) {
  const { urls, readWrite } = hostURLs(url);
  const deadline = Date.now() + 60000;
  for (;;) {
    let last;
    for (const u of urls) {
      const c = new Client({ connectionString: u });
      // From the start: a backend terminated between connect() and the
      // first query arrives as an 'error' event, which would otherwise end
      // the process; a lost connection is met (and handled) by the next query.
      c.on('error', () => {});
      try {
        await c.connect();
        if (readWrite && (await c.query('SHOW transaction_read_only')).rows[0].transaction_read_only === 'on') {
          throw Object.assign(new Error(`${u}: read-only`), { code: '25006', severity: 'ERROR' });
        }
        return c;
      } catch (e) {
        last = e;
        await c.end().catch(() => {});
      }
    }
    if (!mustReconnect(last) || Date.now() > deadline) throw last;
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function setup(url, topic, group) {
  const c = await connect(url);
  try {
    // notify_when => 'always': this consumer LISTENs without announcing its
    // waits (fanout.wait_begin), so every publish must NOTIFY (docs/wakeups.md).
    await c.query(`SELECT fanout.create_topic($1, semantics => 'pubsub', notify_when => 'always')`, [topic]);
    await c.query(`SELECT fanout.subscribe($1, $2, start_position => 'earliest')`, [topic, group]);
    await c.query('CREATE TABLE IF NOT EXISTS processed (topic text, message_id bigint, payload jsonb, PRIMARY KEY (topic, message_id))');
    const r = await c.query('SELECT channel, notify FROM fanout.topics WHERE topic = $1', [topic]);
    return r.rows[0];
  } finally {
    await c.end();
  }
}

// The producer: each publish is part of a business transaction, with a
// dedupe_key so that it can be retried when its COMMIT's outcome is unknown.
async function publish(url, topic, count) {
  let c = await connect(url);
  const ids = [];
  const run = `${process.pid}-${Date.now()}`;
  try {
    for (let i = 0; i < count; i++) {
      for (;;) {
        try {
          await c.query('BEGIN');
          // A plain object is sent as JSON (pg calls JSON.stringify); a JS array
          // would be sent as a PostgreSQL array, so stringify arrays yourself.
          const r = await c.query('SELECT fanout.publish($1, $2, headers => $3, dedupe_key => $4) AS id',
            [topic, { n: i }, { source: 'node' }, `node-${run}-${i}`]);
          await c.query('COMMIT');
          ids.push(r.rows[0].id); // gotcha: bigint comes back as a string ('42'), keep it one
          break;
        } catch (e) {
          if (!mustReconnect(e)) throw e;
          // If the connection died during COMMIT, the outcome is unknown: the
          // retry with the same dedupe_key returns the first message's id if
          // it did commit.
          console.error(`publish: ${e.message}: reconnecting, retrying with the same dedupe_key`);
          await c.end().catch(() => {});
          c = await connect(url);
        }
      }
    }
  } finally {
    await c.end();
  }
  return ids;
}

class Consumer {
  constructor(url, topic, group, name, channel, notify) {
    Object.assign(this, { url, topic, group, name, channel, notify });
    this.notifications = 0;
    this.fenced = 0;
    this.wakeUp = () => {};
  }

  // Resolves after a notification or one second (the polling fallback).
  sleep() {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, 1000);
      this.wakeUp = () => { clearTimeout(t); resolve(); };
    });
  }

  async listen() {
    // A dedicated connection: notifications arrive as events. When it is
    // lost (a failover), connect again, LISTEN again and poll once
    // (wakeUp): notifications are not replicated.
    const l = await connect(this.url);
    this.listener = l;
    l.on('notification', () => { this.notifications++; this.wakeUp(); });
    l.on('error', () => {});
    l.on('end', () => {
      if (this.stopped || this.listener !== l) return;
      this.listen().then(() => this.wakeUp(), (e) => console.error(`LISTEN: ${e.message}`));
    });
    await l.query(`LISTEN "${this.channel.replace(/"/g, '""')}"`);
  }

  async run(want) {
    if (this.notify) await this.listen();
    let c = await connect(this.url);
    let done = 0;
    try {
      while (done < want) {
        let r;
        try {
          // read in its own short transaction (autocommit)
          r = await c.query(
            `SELECT lease_id, message_id, payload, attempt
               FROM fanout.read($1, $2, $3, max_messages => 10)`, [this.topic, this.group, this.name]);
          for (const m of r.rows) {
            if (await this.handle(c, m)) done++;
          }
        } catch (e) {
          if (!mustReconnect(e)) throw e;
          // A failover: what this page did not ack comes back after its
          // lease; connect again (to the new primary) and read.
          console.error(`consumer: ${e.message}: reconnecting`);
          await c.end().catch(() => {});
          c = await connect(this.url);
          continue;
        }
        if (r.rows.length === 0) await this.sleep();
      }
    } finally {
      this.stopped = true;
      await c.end();
      if (this.listener) await this.listener.end();
    }
    return done;
  }

  // Business write + ack in one transaction; fenced acks roll back.
  async handle(c, m) {
    try {
      await c.query('BEGIN');
      await c.query('INSERT INTO processed VALUES ($1, $2, $3)', [this.topic, m.message_id, m.payload]);
      await c.query('SELECT fanout.ack($1, $2)', [m.lease_id, [m.message_id]]);
      await c.query('COMMIT');
      return true;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => {}); // the connection may be gone (a failover)
      if (e.code === FENCED) {
        // Someone else holds the message now; our insert rolled back.
        this.fenced++;
        console.error(`fenced: ${e.message} (hint: ${e.hint})`);
        return false;
      }
      throw e;
    }
  }
}

// A lease that ran out: its ack is fenced with PGQ11 and a hint.
async function fencingDemo(url, topic, group) {
  await publish(url, topic, 1);
  const c = await connect(url);
  try {
    const slow = await c.query(
      `SELECT lease_id FROM fanout.read($1, $2, 'slow', max_messages => 1, lease => '1 millisecond')`, [topic, group]);
    await new Promise((r) => setTimeout(r, 50));
    const fast = await c.query(`SELECT lease_id FROM fanout.read($1, $2, 'fast')`, [topic, group]);
    try {
      await c.query('SELECT fanout.ack($1)', [slow.rows[0].lease_id]);
    } catch (e) {
      if (e.code !== FENCED || !e.hint) throw e;
      await c.query('SELECT fanout.ack($1)', [fast.rows[0].lease_id]); // the new holder acks
      return true;
    }
    return false;
  } finally {
    await c.end();
  }
}

async function main() {
  const args = parseArgs(process.argv);
  const { channel, notify } = await setup(args.url, args.topic, args.group);
  const count = 'SELECT count(*) FROM processed WHERE topic = $1';
  let c = await connect(args.url);
  const before = Number((await c.query(count, [args.topic])).rows[0].count);
  await c.end();

  const consumer = new Consumer(args.url, args.topic, args.group, 'node-worker-1', channel, notify);
  const running = consumer.run(args.count);
  if (notify) await new Promise((r) => setTimeout(r, 100)); // let LISTEN settle (it also polls)
  const ids = await publish(args.url, args.topic, args.count);
  await running;

  c = await connect(args.url); // a new connection: an idle one may not have survived a failover
  const got = (await c.query('SELECT message_id FROM processed WHERE topic = $1 AND message_id = ANY($2) ORDER BY 1',
    [args.topic, ids]))
    .rows.map((r) => r.message_id);
  const total = Number((await c.query(count, [args.topic])).rows[0].count);
  await c.end();
  const fencedOk = await fencingDemo(args.url, args.topic, args.group);
  const sorted = [...ids].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
  console.log(`node example: ${got.length} of ${ids.length} messages arrived exactly once ` +
    `(${consumer.notifications} notifications; fenced ack caught: ${fencedOk})`);
  const ok = JSON.stringify(got) === JSON.stringify(sorted) && total - before === ids.length &&
    consumer.notifications > 0 && fencedOk;
  process.exit(ok ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(1); });
