-- install.sql — the triggers code package: every file of sql/triggers, in order.
-- Frozen into sql/migrations by `make snapshot-sql` (tern code snapshot).
{{ template "fanout._group_mask_trigger.sql" . }}
{{ template "fanout._notify_trigger.sql" . }}
{{ template "fanout._required_groups_trigger.sql" . }}
{{ template "fanout._tally_trigger.sql" . }}
{{ template "_attach.sql" . }}
