package orchestrator

import (
	"context"
	"fmt"
	"time"
)

// SkippedTopic is one row of fanout.maint_skips(): a topic a maintenance
// function keeps passing by because another transaction holds a lock it
// needs (a tenant's alter_topic or drop_topic left open, say).
type SkippedTopic struct {
	Func         string    `json:"func"`
	Topic        string    `json:"topic"`
	SkippedSince time.Time `json:"skipped_since"`
	LastSkipped  time.Time `json:"last_skipped"`
	Skips        int64     `json:"skips"`
	Reason       string    `json:"reason"`
}

// ReadSkips reads fanout.maint_skips(); nil on a schema without it.
func ReadSkips(ctx context.Context, db DB) ([]SkippedTopic, error) {
	var has bool
	if err := db.QueryRow(ctx, `SELECT to_regprocedure('fanout.maint_skips()') IS NOT NULL`).Scan(&has); err != nil {
		return nil, fmt.Errorf("maintenance skips: %w", err)
	}
	if !has {
		return nil, nil
	}
	rows, err := db.Query(ctx, `SELECT func, topic, skipped_since, last_skipped, skips, reason FROM fanout.maint_skips()`)
	if err != nil {
		return nil, fmt.Errorf("maintenance skips: %w", err)
	}
	defer rows.Close()
	var out []SkippedTopic
	for rows.Next() {
		var s SkippedTopic
		if err := rows.Scan(&s.Func, &s.Topic, &s.SkippedSince, &s.LastSkipped, &s.Skips, &s.Reason); err != nil {
			return nil, fmt.Errorf("maintenance skips: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("maintenance skips: %w", err)
	}
	return out, nil
}
