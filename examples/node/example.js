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

async function connect(url) {
  const c = new Client({ connectionString: url });
  await c.connect();
  return c;
}

async function setup(url, topic, group) {
  const c = await connect(url);
  try {
    await c.query(`SELECT fanout.create_topic($1, semantics => 'pubsub')`, [topic]);
    await c.query(`SELECT fanout.subscribe($1, $2, start_position => 'earliest')`, [topic, group]);
    await c.query('CREATE TABLE IF NOT EXISTS processed (topic text, message_id bigint, payload jsonb, PRIMARY KEY (topic, message_id))');
    const r = await c.query('SELECT channel, notify FROM fanout.topics WHERE topic = $1', [topic]);
    return r.rows[0];
  } finally {
    await c.end();
  }
}

// The producer: each publish is part of a business transaction.
async function publish(url, topic, count) {
  const c = await connect(url);
  const ids = [];
  try {
    for (let i = 0; i < count; i++) {
      await c.query('BEGIN');
      // A plain object is sent as JSON (pg calls JSON.stringify); a JS array
      // would be sent as a PostgreSQL array, so stringify arrays yourself.
      const r = await c.query('SELECT fanout.publish($1, $2, headers => $3) AS id',
        [topic, { n: i }, { source: 'node' }]);
      await c.query('COMMIT');
      ids.push(r.rows[0].id); // gotcha: bigint comes back as a string ('42'), keep it one
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
    // A dedicated connection: notifications arrive as events.
    this.listener = await connect(this.url);
    this.listener.on('notification', () => { this.notifications++; this.wakeUp(); });
    await this.listener.query(`LISTEN "${this.channel.replace(/"/g, '""')}"`);
  }

  async run(want) {
    if (this.notify) await this.listen();
    const c = await connect(this.url);
    let done = 0;
    try {
      while (done < want) {
        // read in its own short transaction (autocommit)
        const r = await c.query(
          `SELECT lease_id, message_id, payload, attempt
             FROM fanout.read($1, $2, $3, max_messages => 10)`, [this.topic, this.group, this.name]);
        for (const m of r.rows) {
          if (await this.handle(c, m)) done++;
        }
        if (r.rows.length === 0) await this.sleep();
      }
    } finally {
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
      await c.query('ROLLBACK');
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
  const c = await connect(args.url);
  const count = 'SELECT count(*) FROM processed WHERE topic = $1';
  const before = Number((await c.query(count, [args.topic])).rows[0].count);

  const consumer = new Consumer(args.url, args.topic, args.group, 'node-worker-1', channel, notify);
  const running = consumer.run(args.count);
  if (notify) await new Promise((r) => setTimeout(r, 100)); // let LISTEN settle (it also polls)
  const ids = await publish(args.url, args.topic, args.count);
  await running;

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
