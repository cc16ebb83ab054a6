#!/usr/bin/env bash
# check.sh — validates deploy/ with promtool (Debian's prometheus package; make test runs it):
#   the alert rules (syntax, then their unit tests), and every PromQL query of
#   the Grafana dashboard (Grafana's $variables replaced by sample values, each
#   query checked as a recording rule).
set -euo pipefail
cd "$(dirname "$0")"
# promtool: on PATH, or extracted from Debian's prometheus package (scripts/deps.sh).
promtool=$(../scripts/deps.sh path promtool) || {
  echo "check.sh: promtool not found (Debian/Ubuntu: apt-get install prometheus)" >&2; exit 1; }
promtool() { "$promtool" "$@"; }
command -v python3 >/dev/null 2>&1 || { echo "check.sh: python3 not found" >&2; exit 1; }
(cd prometheus && promtool check rules alerts.yml && promtool test rules alerts_test.yml)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - grafana/pgq.json "$tmp/dashboard_rules.yml" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1]))
subst = {"$__rate_interval": "5m", "$__range": "6h", "$topic": ".*", "$group": ".*"}
rules = []
for p in dash["panels"]:
    for t in p.get("targets", []):
        e = t["expr"]
        for k, v in subst.items():
            e = e.replace(k, v)
        rules.append({"record": "pgq_dashboard:panel_%d_%s" % (p["id"], t["refId"]), "expr": e})
json.dump({"groups": [{"name": "pgq-dashboard", "rules": rules}]}, open(sys.argv[2], "w"), indent=1)
print("check.sh: %d dashboard queries" % len(rules))
PY
promtool check rules "$tmp/dashboard_rules.yml"
echo "check.sh: deploy/ is valid"
