// Package chaos is pgq's fault-injection harness (make chaos, and a short
// run in make test). It is not part of the production binary: cmd/pgq-chaos
// and this package's tests are its only users.
//
// A run starts its own throwaway PostgreSQL cluster through
// scripts/devdb.sh, publishes unique keys from producers (single and batch
// publishes, some transactions deliberately rolled back, every outcome
// recorded in a local file before and after the commit plus a ledger row in
// the same transaction), consumes them with child processes (the harness
// re-executes itself as a worker: hand-written SQL consumers and consumers of
// the client package, each recording every delivery in a local file before it
// acks), injects faults on a schedule (immediate server stops, terminated
// consumer backends, consumers SIGKILLed mid-page, the scheduler leader
// SIGKILLed, acks after lease expiry) and verifies, per group, that every
// committed key was delivered, no rolled-back key was, and every duplicate
// is of an allowed kind. The soak also covers the newer topic kinds
// (producer_kinds.go, worker_kinds.go: key partitions, sequence ordering,
// delays, priorities, dedupe keys) and scripted events (events.go: a group
// subscribing 'earliest', pause/resume, seek, replay, alter_topic raising
// P), and the verifier checks their order (per key, per aggregate, by
// priority) and that nothing comes early (before deliver_at, before the
// predecessor's ack). See README "How we test".
package chaos
