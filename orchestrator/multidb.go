package orchestrator

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// Site is one database a sidecar serves: its scheduler (with its own pool,
// leader election and jobs) and, when the console is on, its console.
type Site struct {
	// Name is the database's name: the value of the "database" label of
	// its series and its console's path (/db/<name>/).
	Name    string
	Sched   *Scheduler
	Console *Console // nil when the console is off
}

// siteNameRE is what a site name may be: it goes into paths and labels.
var siteNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,200}$`)

// CheckSiteNames rejects empty, duplicate and unusable names.
func CheckSiteNames(names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if !siteNameRE.MatchString(n) {
			return fmt.Errorf("database name %q: want 1-200 letters, digits or _ . : @ -", n)
		}
		if seen[n] {
			return fmt.Errorf("database %q is given twice", n)
		}
		seen[n] = true
	}
	return nil
}

// DatabaseHealth is one database's /healthz entry of a sidecar serving
// several.
type DatabaseHealth struct {
	Database string `json:"database"`
	Health   Health `json:"health"`
}

// MultiHealth is the body of /healthz of a sidecar serving several
// databases: "unavailable" (HTTP 503) when any database is, "degraded"
// when any is and none is unavailable, else "ok".
type MultiHealth struct {
	Status    string           `json:"status"`
	Reason    string           `json:"reason,omitempty"`
	Databases []DatabaseHealth `json:"databases"`
}

// MultiHandler serves a sidecar of several databases on one listener:
//
//	GET /metrics            every database's series, each labelled database="<name>"
//	GET /healthz            MultiHealth (503 when a database is unavailable)
//	GET /                   the console's index: every database, its leader and health
//	/db/<name>/...          that database's console (page, /api/...) and its
//	                        own /metrics and /healthz, unlabelled
//
// next, when not nil, serves every other path.
func MultiHandler(sites []Site, next http.Handler) http.Handler {
	mux := http.NewServeMux()
	gs := make(prometheus.Gatherers, 0, len(sites))
	for _, s := range sites {
		gs = append(gs, labelGatherer{g: s.Sched.Registry(), name: "database", value: s.Name})
		prefix := "/db/" + s.Name
		var h http.Handler = s.Sched.Handler()
		if s.Console != nil {
			h = s.Console.Handler(h)
		}
		mux.Handle(prefix+"/", http.StripPrefix(prefix, h))
		mux.Handle(prefix, http.RedirectHandler(prefix+"/", http.StatusMovedPermanently))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(gs, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		h := multiHealth(r, sites)
		w.Header().Set("Content-Type", "application/json")
		if h.Status == "unavailable" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		h := multiHealth(r, sites)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_ = multiIndex.Execute(w, h)
	})
	if sites[0].Console != nil {
		mux.Handle("GET /static/", sites[0].Console.Handler(nil)) // the index's style sheet
	}
	if next != nil {
		mux.Handle("/", next)
	}
	return mux
}

func multiHealth(r *http.Request, sites []Site) MultiHealth {
	out := MultiHealth{Status: "ok"}
	var reasons []string
	for _, s := range sites {
		h := s.Sched.Health(r.Context())
		out.Databases = append(out.Databases, DatabaseHealth{Database: s.Name, Health: h})
		if h.Reason != "" {
			reasons = append(reasons, s.Name+": "+h.Reason)
		}
		switch {
		case h.Status == "unavailable":
			out.Status = "unavailable"
		case h.Status == "degraded" && out.Status == "ok":
			out.Status = "degraded"
		}
	}
	out.Reason = strings.Join(reasons, "; ")
	return out
}

var multiIndex = template.Must(template.New("index").Funcs(template.FuncMap{
	"path": func(name string) string { return "db/" + url.PathEscape(name) + "/" },
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pgq console: databases</title>
<link rel="stylesheet" href="static/console.css">
</head>
<body>
<header><h1>pgq console</h1><span class="muted">one sidecar, {{len .Databases}} databases · status {{.Status}}</span></header>
<main>
<section id="databases"><h2>Databases</h2>
<table>
<thead><tr><th>Database</th><th>Status</th><th>Connection</th><th>Leader</th><th>Sidecar</th><th>Jobs</th><th>Reason</th></tr></thead>
<tbody>
{{range .Databases}}<tr class="database status-{{.Health.Status}}" data-database="{{.Database}}" data-status="{{.Health.Status}}" data-leader="{{.Health.Leader}}">
<td><a href="{{path .Database}}">{{.Database}}</a></td><td>{{.Health.Status}}</td><td>{{.Health.Database}}</td>
<td>{{if .Health.Leader}}this sidecar{{else}}another sidecar or none{{end}}</td><td>{{.Health.LeaderID}}</td><td class="num">{{len .Health.Jobs}}</td><td>{{.Health.Reason}}</td></tr>
{{end}}</tbody>
</table>
</section>
</main>
<footer class="muted"><a href="/metrics">/metrics</a> (every series labelled database) · <a href="/healthz">/healthz</a></footer>
</body>
</html>
`))

// labelGatherer adds one constant label to every series of g: one
// sidecar's registries, one per database, merged on one /metrics.
type labelGatherer struct {
	g           prometheus.Gatherer
	name, value string
}

func (l labelGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := l.g.Gather()
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(l.name), Value: proto.String(l.value)})
			sort.Slice(m.Label, func(i, j int) bool { return m.Label[i].GetName() < m.Label[j].GetName() })
		}
	}
	return mfs, err
}
