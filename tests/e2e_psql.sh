#!/usr/bin/env bash
# e2e_psql.sh [FILE.md ...] — runs every ```sql block of README.md and of the
# reference pages in docs/ it links to (or of the given Markdown files)
# VERBATIM in psql, against fresh databases migrated by the pgq-scheduler
# binary, and compares the output the text shows: proof that pgq needs no Go
# (or any client library) and that the documented SQL can be pasted as it
# stands. Shell and Go blocks of those pages are checked too:
#
# - A ```sh block of a docs/ page must say how it is run (below): either it
#   runs here, verbatim, in bash (-e, -u, -o pipefail) from the repository's
#   root with DATABASE_URL set to a fresh, empty database, bin/ on PATH and
#   GOBIN a temporary directory first on PATH; or a test named beside it
#   reads it from the page and runs it. (The README's own shell blocks are
#   `make run`, `make test` and psql: the README's reader runs them, and
#   this script is run by the second.)
# - A ```go block must be quoted verbatim (one tab deeper) from
#   client/example_test.go, whose Example functions go test compiles and
#   runs against a real database; a line "// ..." marks what the quote
#   leaves out (the excerpts around it come in the file in that order).
#
# - Each "## " section of a file gets a database of its own; its blocks run in
#   order in one psql session (so psql variables set with \gset and temporary
#   tables carry from one block to the next, as they would for a reader).
# - Shown output is compared where the text shows it, robustly: an aligned
#   psql table in comment lines after a statement (header, ----+---- line,
#   rows) must match the statement's result as a set of rows, except in
#   columns whose values differ from run to run (ids of leases, timestamps,
#   ages); a one-word comment at the end of a statement's line (`-- 3`), or on
#   the line after a statement or an \echo, must be its only value.
# - An HTML comment on the line before a block can say:
#     <!-- e2e: before SQL -->       SQL the reader already ran (their own
#                                    tables, topics) runs before the block;
#     <!-- e2e: roles NAME... -->    roles the block grants to are created
#                                    before it and dropped at the end;
#     <!-- e2e: run by FILE -->      the block needs a server setting a fresh
#                                    database cannot have (pg_cron, a second
#                                    cluster, a running sidecar), and FILE, a
#                                    test that reads it from the same .md
#                                    file, runs it verbatim instead;
#     <!-- e2e: sh -->               (```sh blocks) run it here, as above.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?DATABASE_URL must point at a PostgreSQL server (make test sets it)}"
# The README and the reference pages split from it (docs/*.md pages of
# their own, such as docs/capture.md, are run by their own tests).
[ $# -gt 0 ] || set -- README.md docs/sql-api.md docs/security.md docs/operations.md docs/console.md \
  docs/go-client.md docs/benchmarks.md docs/development.md
exec python3 - "$@" <<'PY'
import os, re, subprocess, sys, tempfile, urllib.parse

server = os.environ["DATABASE_URL"]
env = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")

def with_db(url, db):
    u = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))

def psql(url, sql):
    return subprocess.run(["psql", "-qX", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                          env=env, capture_output=True, text=True)

# Blocks: (file, line, section, directive, lines), of one language.
def blocks(path, lang="sql"):
    out, section, prev, inside, cur = [], "(before the first section)", "", False, None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if inside:
            if line.startswith("```"):
                out.append(cur); inside = False
            else:
                cur[4].append((n, line))
            continue
        if line.startswith("## "):
            section = line[3:].strip()
        if line.strip() == "```" + lang:
            m = re.fullmatch(r"<!--\s*e2e:\s*(.*?)\s*-->", prev.strip())
            cur = (path, n, section, m.group(1) if m else "", [])
            inside = True
        if line.strip():
            prev = line
    return out

TABLE_SEP = re.compile(r"^-+(\+-+)*$")
ONE_WORD = re.compile(r"^\S+$")
# Columns whose values differ from run to run: lease ids, times, ages.
VOLATILE_WORDS = {"lease", "at", "age", "wait", "time", "timestamp", "eta", "heartbeat", "seconds", "interval"}
def volatile(column):
    return column == "lease_id" or bool(VOLATILE_WORDS & set(column.split("_")))

def is_comment(line):
    return line.lstrip().startswith("--")

def comment_text(line):
    return line.lstrip()[2:].strip()

# chunks splits a block into statements, each with what the text shows as
# its output: (first_line, sql_lines, expected) where expected is None,
# ("word", w) or ("table", [comment lines]).
def chunks(lines):
    out, cur, first, i = [], [], None, 0
    def close(expected):
        nonlocal cur, first
        out.append((first, "\n".join(cur), expected)); cur, first = [], None
    while i < len(lines):
        n, line = lines[i]
        if first is None and (not line.strip() or is_comment(line)):
            i += 1
            continue
        if first is None:
            first = n
        cur.append(line)
        i += 1
        code, trailing = line, None
        m = re.match(r"^(.*?;)\s*--\s*(.*)$", line)
        if m and not line.lstrip().startswith("\\"):
            code, trailing = m.group(1), m.group(2)
        ends = line.lstrip().startswith("\\") or code.rstrip().endswith(";") or code.rstrip().endswith("\\gset")
        if not ends:
            continue
        expected = ("word", trailing) if trailing and ONE_WORD.match(trailing) else None
        # Output shown in the comment lines that follow.
        j, shown = i, []
        while j < len(lines) and is_comment(lines[j][1]):
            shown.append(comment_text(lines[j][1])); j += 1
        if len(shown) >= 2 and "|" in shown[0] and TABLE_SEP.match(shown[1].replace(" ", "")):
            k = 2
            while k < len(shown) and "|" in shown[k]:
                k += 1
            expected = ("table", shown[:k])
            i += k
        elif shown and ONE_WORD.match(shown[0]) and expected is None:
            expected = ("word", shown[0])
            i += 1
        close(expected)
    if cur:
        close(None)
    return out

def parse_table(text_lines):
    rows = [l for l in text_lines if l.strip() and not TABLE_SEP.match(l.replace(" ", ""))]
    if not rows:
        return [], []
    split = lambda l: [c.strip() for c in l.split("|")]
    return split(rows[0]), [split(r) for r in rows[1:]]

def compare(expected, got):
    kind, want = expected
    lines = [l for l in got.splitlines() if l.strip()]
    if kind == "word":
        if len(lines) >= 2 and TABLE_SEP.match(lines[1].replace(" ", "")):
            lines = lines[2:]
        value = lines[0].strip() if len(lines) == 1 else "\n".join(lines)
        return value == want, "want %s, got %s" % (want, value)
    wh, wrows = parse_table(want)
    gh, grows = parse_table(lines)
    if wh != gh:
        return False, "columns %s, want %s" % (gh, wh)
    keep = [k for k, c in enumerate(wh) if not volatile(c)]
    pick = lambda rows: sorted([tuple(r[k] if k < len(r) else "" for k in keep) for r in rows])
    ok = pick(wrows) == pick(grows)
    return ok, "rows %s, want %s (compared columns %s)" % (pick(grows), pick(wrows), [wh[k] for k in keep])

fail = 0
def report(ok, what, why=""):
    global fail
    print(("ok   " if ok else "FAIL ") + what + ("" if ok or not why else ": " + why))
    if not ok:
        fail = 1

all_blocks = [b for path in sys.argv[1:] for b in blocks(path)]
if not all_blocks:
    report(False, "no ```sql blocks in " + " ".join(sys.argv[1:]))
sections = []
for b in all_blocks:
    key = (b[0], b[2])
    if not sections or sections[-1][0] != key:
        sections.append((key, []))
    sections[-1][1].append(b)

roles = []
pid = os.getpid()
for k, ((path, section), bs) in enumerate(sections):
    db = "pgq_e2e_%d_%d" % (pid, k)
    url = with_db(server, db)
    if all(b[3].startswith("run by ") for b in bs):
        for b in bs:
            other = b[3][len("run by "):].strip()
            ok = os.path.isfile(other) and os.path.basename(path) in open(other, encoding="utf-8").read()
            report(ok, "%s:%d (%s) runs in %s, not here" % (path, b[1], section, other),
                   "%s does not exist or does not read %s" % (other, path))
        continue
    r = psql(server, "CREATE DATABASE " + db)
    if r.returncode:
        report(False, "create database " + db, r.stderr.strip()); continue
    try:
        m = subprocess.run(["bin/pgq-scheduler", "migrate", "--database-url", url], capture_output=True, text=True)
        if m.returncode:
            report(False, "migrate " + db, m.stderr.strip()); continue
        script, expect = [], {}
        for (_, line, _, directive, lines) in bs:
            where = "%s:%d (%s)" % (path, line, section)
            if directive.startswith("run by "):
                other = directive[len("run by "):].strip()
                ok = os.path.isfile(other) and os.path.basename(path) in open(other, encoding="utf-8").read()
                report(ok, "%s runs in %s, not here" % (where, other),
                       "%s does not exist or does not read %s" % (other, path))
                continue
            if directive.startswith("roles "):
                for role in directive.split()[1:]:
                    r = psql(server, "DO $$ BEGIN CREATE ROLE %s; EXCEPTION WHEN duplicate_object THEN NULL; END $$" % role)
                    if r.returncode:
                        report(False, "create role " + role, r.stderr.strip())
                    roles.append(role)
            elif directive.startswith("before "):
                script.append("\\echo '@@before %d'" % line)
                script.append(directive[len("before "):])
            elif directive:
                report(False, where + ": unknown directive " + directive)
            for (first, sql, expected) in chunks(lines):
                script.append("\\echo '@@%d'" % first)
                script.append(sql)
                if expected:
                    expect[first] = (expected, sql)
        run = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-P", "pager=off", "-P", "footer=off",
                              url, "-f", "-"], input="\n".join(script) + "\n", env=env,
                             capture_output=True, text=True)
        outputs, cur = {}, None
        for l in run.stdout.splitlines():
            m = re.fullmatch(r"@@(before )?(\d+)", l)
            if m:
                cur = None if m.group(1) else int(m.group(2))
                if cur is not None:
                    outputs[cur] = []
            elif cur is not None:
                outputs[cur].append(l)
        if run.returncode:
            last = max(outputs) if outputs else 0
            report(False, "%s: the statement at line %d failed" % (section, last), run.stderr.strip())
            continue
        report(True, "%s: %d statements run verbatim (%s)" % (section, len(outputs), path))
        for first, (expected, sql) in sorted(expect.items()):
            ok, why = compare(expected, "\n".join(outputs.get(first, [])))
            report(ok, "%s:%d shows its output" % (path, first), why + "\n  " + sql.replace("\n", "\n  "))
    finally:
        psql(server, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)

def reads(other, path):
    return os.path.isfile(other) and (path in open(other, encoding="utf-8").read()
                                      or os.path.basename(path) in open(other, encoding="utf-8").read())

# Shell blocks of docs/ pages: run here (e2e: sh) or by the test named.
for path in sys.argv[1:]:
    for (_, line, section, directive, lines) in blocks(path, "sh"):
        where = "%s:%d (%s)" % (path, line, section)
        if directive.startswith("run by "):
            other = directive[len("run by "):].strip()
            report(reads(other, path), "%s (shell) runs in %s, not here" % (where, other),
                   "%s does not exist or does not read %s" % (other, path))
            continue
        if directive != "sh":
            if os.path.basename(path) != "README.md":
                report(False, where + ": a shell block no test runs (mark it <!-- e2e: sh --> or <!-- e2e: run by TEST -->)")
            continue
        db = "pgq_e2e_%d_sh%d" % (pid, line)
        r = psql(server, "CREATE DATABASE " + db)
        if r.returncode:
            report(False, "create database " + db, r.stderr.strip()); continue
        try:
            with tempfile.TemporaryDirectory() as gobin:
                shenv = dict(env, DATABASE_URL=with_db(server, db), GOBIN=gobin,
                             PATH=gobin + os.pathsep + os.path.abspath("bin") + os.pathsep + os.environ["PATH"])
                body = "\n".join(l for (_, l) in lines) + "\n"
                run = subprocess.run(["bash", "-euo", "pipefail", "-c", body], env=shenv,
                                     capture_output=True, text=True)
                report(run.returncode == 0, "%s: shell block run verbatim" % where,
                       "exit %d\n%s%s" % (run.returncode, run.stdout, run.stderr))
        finally:
            psql(server, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)

# Go blocks: quoted from client/example_test.go.
examples = open("client/example_test.go", encoding="utf-8").read()
for path in sys.argv[1:]:
    for (_, line, section, directive, lines) in blocks(path, "go"):
        # "// ..." on a line of its own marks what the quote leaves out: the
        # excerpts between such lines must come in this order.
        excerpts, cur = [], []
        for (_, l) in lines:
            if l.strip() == "// ...":
                excerpts.append(cur); cur = []
            else:
                cur.append(l)
        excerpts.append(cur)
        pos, missing = 0, None
        for ex in excerpts:
            body = "\n".join(("\t" + l) if l.strip() else "" for l in ex)
            at = examples.find(body, pos)
            if at < 0:
                missing = body; break
            pos = at + len(body)
        report(missing is None, "%s:%d (%s): Go block quoted from client/example_test.go" % (path, line, section),
               "not found verbatim (one tab deeper, after the excerpts before it) in client/example_test.go:\n%s" % missing)

for role in sorted(set(roles)):
    r = psql(server, "DROP ROLE IF EXISTS %s" % role)
    if r.returncode:
        report(False, "drop role " + role, r.stderr.strip())

print("e2e_psql: all checks passed" if fail == 0 else "e2e_psql: FAILED")
sys.exit(fail)
PY
