-- install.sql — the triggers code package: every file of sql/triggers, in order.
-- Frozen into sql/migrations by `make snapshot-sql` (tern code snapshot).
{{ template "fanout._notify_trigger.sql" . }}
