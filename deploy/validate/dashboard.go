package validate

// The check of deploy/grafana/zarrgate.json: its structure (what Grafana
// needs to import it and lay it out), its queries (PromQL, parsed by
// Prometheus's own parser) and the metrics they name against a scrape of
// the real processes' /metrics.

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// Dashboard is the part of a Grafana dashboard model this check reads.
type Dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []Panel `json:"panels"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a panel or a row (whose Panels are its panels when collapsed).
type Panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	GridPos    *GridPos        `json:"gridPos"`
	Datasource *DatasourceRef  `json:"datasource"`
	Targets    []Target        `json:"targets"`
	Panels     []Panel         `json:"panels"`
	FieldCfg   json.RawMessage `json:"fieldConfig"`
}

// GridPos is a panel's place in the 24-column grid.
type GridPos struct {
	X, Y, W, H int
}

// DatasourceRef names a data source, here always the ${datasource} variable.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *DatasourceRef `json:"datasource"`
}

// Variable is a template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or {"query": ...} for a query variable
	Datasource *DatasourceRef  `json:"datasource"`
}

// DecodeDashboard decodes a dashboard strictly enough to catch a misspelt
// key of what is checked: unknown keys elsewhere are Grafana's business.
func DecodeDashboard(data []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// The data source every panel and query variable uses: the dashboard's
// own variable, so that an importer picks their Prometheus.
var wantDS = DatasourceRef{Type: "prometheus", UID: "${datasource}"}

// Query is one PromQL expression of the dashboard and where it is.
type Query struct {
	Where string // panel "title" target A, or variable "job"
	Expr  string // as written, with template variables
	AST   parser.Expr
	// Selector: a variable's label_values selector, which reads only
	// label values (so may name a counter without rate()).
	Selector bool
}

// Grafana's built-in variables a query may use, and what the check puts in
// their place to parse it (any valid value of the right kind).
var builtins = map[string]string{
	"__rate_interval": "1m", "__interval": "30s", "__range": "1h",
	"__interval_ms": "30000", "__range_s": "3600", "__range_ms": "3600000",
}

var varRE = regexp.MustCompile(`\$(?:\{(\w+)(?::\w+)?\}|(\w+)|\[\[(\w+)\]\])`)

// substitute replaces the template variables of expr by values that
// parse: the dashboard's own variables (job, instance: used in regex
// matchers) by ".+", Grafana's by a duration. A variable that is neither
// is an error.
func substitute(expr string, vars map[string]bool) (string, error) {
	var bad []string
	out := varRE.ReplaceAllStringFunc(expr, func(m string) string {
		s := varRE.FindStringSubmatch(m)
		name := s[1] + s[2] + s[3]
		if v, ok := builtins[name]; ok {
			return v
		}
		if vars[name] {
			return ".+"
		}
		bad = append(bad, "$"+name)
		return m
	})
	if bad != nil {
		return "", fmt.Errorf("template variables %v are not defined by the dashboard", bad)
	}
	return out, nil
}

var promql = parser.NewParser(parser.Options{})

// CheckDashboard checks the structure of d and parses every query,
// returning the queries and every problem found.
func CheckDashboard(d *Dashboard) ([]Query, []error) {
	var errs []error
	errorf := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if d.UID == "" || d.Title == "" {
		errorf("the dashboard needs a uid and a title")
	}
	if d.SchemaVersion < 36 {
		errorf("schemaVersion %d: want 36 or later (data sources referenced by uid)", d.SchemaVersion)
	}

	vars := map[string]bool{}
	var queries []Query
	hasDS := false
	for _, v := range d.Templating.List {
		if vars[v.Name] {
			errorf("variable %q defined twice", v.Name)
		}
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			var q string
			if json.Unmarshal(v.Query, &q) != nil || q != "prometheus" || v.Name != "datasource" {
				errorf("variable %q: want the data source variable named datasource, of type prometheus", v.Name)
			}
			hasDS = true
		case "query":
			if v.Datasource == nil || *v.Datasource != wantDS {
				errorf("variable %q: data source %v, want %v", v.Name, v.Datasource, wantDS)
			}
			var vq struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v.Query, &vq) != nil || vq.Query == "" {
				errorf("variable %q: no query", v.Name)
				continue
			}
			// label_values(SELECTOR, label) is Grafana's, not PromQL: its
			// selector is checked as one.
			m := regexp.MustCompile(`^label_values\((.*),\s*(\w+)\)$`).FindStringSubmatch(vq.Query)
			if m == nil {
				errorf("variable %q: query %q: want label_values(selector, label)", v.Name, vq.Query)
				continue
			}
			q := parseQuery(&errs, fmt.Sprintf("variable %q", v.Name), m[1], vars)
			if _, ok := q.AST.(*parser.VectorSelector); !ok && q.AST != nil {
				errorf("variable %q: label_values of %q: want a series selector", v.Name, m[1])
			}
			q.Selector = true
			queries = append(queries, q)
		}
	}
	if !hasDS {
		errorf("no data source variable: panels must use ${datasource}")
	}
	for _, name := range []string{"job", "instance"} {
		if !vars[name] {
			errorf("no %q variable", name)
		}
	}

	ids := map[int]string{}
	var all []Panel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	var boxes []Panel
	for _, p := range all {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID <= 0 {
			errorf("%s: no id", where)
		} else if other, dup := ids[p.ID]; dup {
			errorf("%s: id %d is also panel %q's", where, p.ID, other)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			errorf("%s: no title", where)
		}
		g := p.GridPos
		if g == nil {
			errorf("%s: no gridPos", where)
			continue
		}
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			errorf("%s: gridPos %+v is not within the 24-column grid", where, *g)
		}
		if p.Type == "row" {
			if len(p.Targets) > 0 {
				errorf("%s: a row has no queries", where)
			}
			continue
		}
		for _, b := range boxes {
			h := b.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				errorf("%s overlaps panel %d %q", where, b.ID, b.Title)
			}
		}
		boxes = append(boxes, p)
		if p.Datasource == nil || *p.Datasource != wantDS {
			errorf("%s: data source %v, want %v", where, p.Datasource, wantDS)
		}
		if len(p.Targets) == 0 {
			errorf("%s: no queries", where)
		}
		refs := map[string]bool{}
		for _, t := range p.Targets {
			tw := fmt.Sprintf("%s target %s", where, t.RefID)
			if t.RefID == "" || refs[t.RefID] {
				errorf("%s: refId missing or repeated", tw)
			}
			refs[t.RefID] = true
			if t.Datasource != nil && *t.Datasource != wantDS {
				errorf("%s: data source %v, want %v", tw, t.Datasource, wantDS)
			}
			if strings.TrimSpace(t.Expr) == "" {
				errorf("%s: empty expr", tw)
				continue
			}
			queries = append(queries, parseQuery(&errs, tw, t.Expr, vars))
		}
	}
	return queries, errs
}

func parseQuery(errs *[]error, where, expr string, vars map[string]bool) Query {
	q := Query{Where: where, Expr: expr}
	s, err := substitute(expr, vars)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %v", where, err))
		return q
	}
	ast, err := promql.ParseExpr(s)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: not PromQL: %v\n%s", where, err, expr))
		return q
	}
	q.AST = ast
	return q
}

// Family is a metric family of a scrape: its type and the label names its
// series carry.
type Family struct {
	Type   dto.MetricType
	Labels map[string]bool
}

// ParseScrape reads /metrics responses (the Prometheus text format) into
// families by name, merging the processes' label names.
func ParseScrape(scrapes ...io.Reader) (map[string]*Family, error) {
	out := map[string]*Family{}
	for _, r := range scrapes {
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(r)
		if err != nil {
			return nil, err
		}
		for name, mf := range mfs {
			f := out[name]
			if f == nil {
				f = &Family{Type: mf.GetType(), Labels: map[string]bool{}}
				out[name] = f
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					f.Labels[l.GetName()] = true
				}
			}
		}
	}
	return out, nil
}

// Labels Prometheus adds to every series it scrapes.
var targetLabels = map[string]bool{"job": true, "instance": true}

// series resolves a name a query selects to its family: a histogram's
// _bucket (with the le label), _sum and _count are series of the family
// without the suffix.
func series(fams map[string]*Family, name string) (*Family, string, map[string]bool) {
	if f := fams[name]; f != nil && f.Type != dto.MetricType_HISTOGRAM && f.Type != dto.MetricType_SUMMARY {
		return f, "", f.Labels
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if f := fams[base]; ok && f != nil && f.Type == dto.MetricType_HISTOGRAM {
			labels := f.Labels
			if suf == "_bucket" {
				labels = maps(f.Labels, "le")
			}
			return f, suf, labels
		}
	}
	return nil, "", nil
}

func maps(m map[string]bool, extra string) map[string]bool {
	out := map[string]bool{extra: true}
	for k := range m {
		out[k] = true
	}
	return out
}

// rateFuncs take a counter's range vector; a counter is read only through
// them (a counter's raw value is its process's history, not a rate).
var rateFuncs = map[string]bool{"rate": true, "irate": true, "increase": true, "resets": true}

// CheckQueries checks each query against the scraped families: every
// metric it selects is exported (a histogram's as _bucket, _sum or
// _count), every label a matcher or a grouping names is a label of it (or
// job, instance), counters are read through rate() or increase() and
// gauges are not, and histogram_quantile takes buckets grouped by le.
func CheckQueries(queries []Query, fams map[string]*Family) []error {
	var errs []error
	for _, q := range queries {
		if q.AST == nil {
			continue
		}
		errorf := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", q.Where, fmt.Sprintf(format, a...)))
		}
		// The labels each selected series can carry, for the groupings.
		known := map[string]bool{"le": false}
		parser.Inspect(q.AST, func(node parser.Node, path []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			f, suf, labels := series(fams, vs.Name)
			if vs.Name == "" {
				errorf("a selector without a metric name: %s", vs)
				return nil
			}
			if f == nil {
				errorf("metric %s is not in the scrape of the gateway and its workers", vs.Name)
				return nil
			}
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					continue
				}
				if !labels[m.Name] && !targetLabels[m.Name] {
					errorf("%s has no label %q (it has %v)", vs.Name, m.Name, keys(labels))
				}
			}
			for l := range labels {
				known[l] = true
			}
			counter := f.Type == dto.MetricType_COUNTER || suf != ""
			rated := slices.ContainsFunc(path, func(n parser.Node) bool {
				c, ok := n.(*parser.Call)
				return ok && rateFuncs[c.Func.Name]
			})
			switch {
			case q.Selector:
			case counter && !rated:
				errorf("%s is a counter: read it through rate() or increase()", vs.Name)
			case !counter && rated:
				errorf("%s is a %s, not a counter: rate() of it means nothing", vs.Name, strings.ToLower(f.Type.String()))
			}
			return nil
		})
		parser.Inspect(q.AST, func(node parser.Node, _ []parser.Node) error {
			switch n := node.(type) {
			case *parser.AggregateExpr:
				for _, l := range n.Grouping {
					if !known[l] && !targetLabels[l] {
						errorf("grouping by %q, a label none of its series has", l)
					}
				}
			case *parser.BinaryExpr:
				if n.VectorMatching != nil {
					for _, l := range n.VectorMatching.MatchingLabels {
						if !known[l] && !targetLabels[l] {
							errorf("matching on %q, a label none of its series has", l)
						}
					}
				}
			case *parser.Call:
				if n.Func.Name != "histogram_quantile" {
					return nil
				}
				inner := n.Args[1]
				for p, ok := inner.(*parser.ParenExpr); ok; p, ok = inner.(*parser.ParenExpr) {
					inner = p.Expr
				}
				if a, ok := inner.(*parser.AggregateExpr); ok && slices.Contains(a.Grouping, "le") == a.Without {
					errorf("histogram_quantile over an aggregation that drops le: group by (le, ...)")
				}
				parser.Inspect(n.Args[1], func(m parser.Node, _ []parser.Node) error {
					if vs, ok := m.(*parser.VectorSelector); ok && !strings.HasSuffix(vs.Name, "_bucket") {
						errorf("histogram_quantile of %s: want a histogram's _bucket series", vs.Name)
					}
					return nil
				})
			}
			return nil
		})
	}
	return errs
}
