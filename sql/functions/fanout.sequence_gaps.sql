-- View fanout.sequence_gaps: per consumer group and aggregate of a
-- sequence-ordered topic, each range of sequences that is missing while
-- later sequences wait for it (fanout.seq_wait): missing_from..missing_to,
-- waiting_messages (messages waiting behind this gap, i.e. with a higher
-- sequence) and oldest_waiting_age (how long the aggregate's oldest waiting
-- message has waited). A sequence that was handed out and not acked yet is
-- not missing. Computed from the waiting messages and their aggregates'
-- state only: O(waiting messages), whatever the sequence numbers.
-- Shows only the groups of topics the caller may consume (fanout._may).
-- The view reads fanout._sequence_gap_rows(), which runs with JIT off: at a
-- million waiting messages the planner's cost estimate crosses
-- jit_above_cost, and compiling took longer than the query.
-- Tables: fanout.seq_wait, fanout.seq_state, fanout.consumer_group, fanout.topic.
CREATE OR REPLACE VIEW fanout.sequence_gaps WITH (security_barrier) AS
SELECT * FROM fanout._sequence_gap_rows();
