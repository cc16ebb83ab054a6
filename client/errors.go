package client

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATE codes that pgq raises on purpose (docs/errors.md). Every pgq
// error is a *pgconn.PgError with one of these codes; use SQLState, IsFenced
// and IsNotFound rather than matching messages, which may change.
const (
	CodeTopicNotFound         = "PGQ01" // the topic does not exist
	CodeTopicConflict         = "PGQ02" // create_topic with different settings
	CodeInvalidArgument       = "PGQ03" // NULL, out of range or unknown word
	CodeInvalidName           = "PGQ04" // empty, too long or control characters
	CodePayloadTooLarge       = "PGQ05" // payload over max_payload_bytes
	CodeHeadersNotObject      = "PGQ06" // headers is not a JSON object
	CodeNoSubscriptions       = "PGQ07" // block_writes_without_subscriptions
	CodeTopicNotEmpty         = "PGQ08" // drop_topic refused
	CodeReadCommitted         = "PGQ09" // needs READ COMMITTED
	CodeLeaseNotFound         = "PGQ10" // the lease does not exist
	CodeFenced                = "PGQ11" // the lease lost its messages to another consumer
	CodeNotInLease            = "PGQ12" // a message id is not part of the lease
	CodeGroupRequired         = "PGQ13" // group_name is required on pubsub topics
	CodeGroupNotFound         = "PGQ14" // the group is not subscribed
	CodeInvalidTransition     = "PGQ15" // invalid group status transition
	CodeGroupCancelled        = "PGQ16" // the group is cancelled (terminal)
	CodeTooManyGroups         = "PGQ17" // a 65th group on a reference-mode topic
	CodeMessageNotRetained    = "PGQ18" // the message is not (or no longer) retained
	CodePubSubOnly            = "PGQ19" // the operation exists only for pubsub topics
	CodeDeadLetterNotFound    = "PGQ20" // not a dead letter of that group
	CodeNoGrant               = "PGQ21" // the role has no topic grant for this privilege
	CodeLimitReached          = "PGQ22" // a hard limit (groups, members, a lease's 7 days)
	CodeOrderingConflict      = "PGQ23" // sequence, priority or delay that does not fit the topic's ordering
	CodeMixedPartitionReads   = "PGQ24" // automatic and explicit partition reads mixed in one group
	CodeQuotaReached          = "PGQ25" // a quota the operator set per grant (topics, groups, bytes retained: fanout.set_quota)
	CodeCompletionSwitch      = "PGQ28" // a completion-mode switch in progress or held up by a backfill (docs/completion-switch.md)
	CodeUndefinedFunction     = "42883" // PostgreSQL: no such function (older schema)
	CodeInsufficientPrivilege = "42501" // PostgreSQL: the role may not call it
	CodeInvalidSchemaName     = "3F000" // PostgreSQL: no schema fanout (not migrated)
)

// SQLState returns the SQLSTATE of the first *pgconn.PgError in err's
// chain, or "" when there is none.
func SQLState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsFenced reports whether err is pgq's fencing error (PGQ11): the lease
// expired and its messages went to another consumer. Roll back the
// business transaction that tried to ack; the new holder processes them.
func IsFenced(err error) bool { return SQLState(err) == CodeFenced }

// IsNotFound reports whether err says that what was named does not exist:
// the topic (PGQ01), the lease (PGQ10), the group (PGQ14), the retained
// message (PGQ18) or the dead letter (PGQ20).
func IsNotFound(err error) bool {
	switch SQLState(err) {
	case CodeTopicNotFound, CodeLeaseNotFound, CodeGroupNotFound, CodeMessageNotRetained, CodeDeadLetterNotFound:
		return true
	}
	return false
}
