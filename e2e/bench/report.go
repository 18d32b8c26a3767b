package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// row is one line of the table: a measured value, the reference it is
// compared with (a baseline measured in the same run, or a fixed budget),
// their ratio and the target, which comes from the table in targets.go.
type row struct {
	ID      string   `json:"id"`
	Key     string   `json:"target_key"`
	Measure string   `json:"measure"`
	Unit    string   `json:"unit"`
	Value   float64  `json:"value"`
	Ref     *float64 `json:"reference,omitempty"`
	RefName string   `json:"reference_name,omitempty"`
	Ratio   *float64 `json:"ratio,omitempty"`
	Target  string   `json:"target"`
	Met     *bool    `json:"met,omitempty"`
	// Beyond counts the objects outside the reference set (P3's objects).
	Beyond *int `json:"objects_beyond,omitempty"`
	// Load is the 1-minute load average while the samples behind the
	// row were taken: how busy the machine was, the cluster included.
	Load string `json:"load,omitempty"`
}

// loadSpan is the range of the 1-minute load average over a measurement.
type loadSpan struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	n   int
}

// newLoadSpan starts a span with the load average now.
func newLoadSpan() *loadSpan {
	s := &loadSpan{}
	s.sample()
	return s
}

func (s *loadSpan) sample() { s.add(loadNow()) }

func (s *loadSpan) add(v float64) {
	if v < 0 {
		return // unreadable
	}
	if s.n == 0 || v < s.Min {
		s.Min = v
	}
	if s.n == 0 || v > s.Max {
		s.Max = v
	}
	s.n++
}

func (s *loadSpan) merge(o *loadSpan) {
	if o != nil && o.n > 0 {
		s.add(o.Min)
		s.add(o.Max)
	}
}

func (s *loadSpan) String() string {
	switch {
	case s == nil || s.n == 0:
		return ""
	case fmt.Sprintf("%.1f", s.Min) == fmt.Sprintf("%.1f", s.Max):
		return fmt.Sprintf("%.1f", s.Min)
	}
	return fmt.Sprintf("%.1f-%.1f", s.Min, s.Max)
}

// setLoad gives the rows from index from on that have none the load span.
func (r *report) setLoad(from int, s *loadSpan) {
	for i := from; i < len(r.Rows); i++ {
		if r.Rows[i].Load == "" {
			r.Rows[i].Load = s.String()
		}
	}
}

type report struct {
	Started   string         `json:"started"`
	DurationS float64        `json:"duration_s"`
	Host      map[string]any `json:"host"`
	Config    map[string]any `json:"config"`
	Targets   []target       `json:"targets"`
	Sides     *sidesReport   `json:"sides,omitempty"`
	Rows      []row          `json:"rows"`
	Details   map[string]any `json:"details"`
	Error     string         `json:"error,omitempty"`
	Leftovers []string       `json:"leftovers,omitempty"`
}

func ptr[T any](v T) *T { return &v }

// add appends a row of the kind key, judged by the table, and returns it
// for the caller to give its load.
func (r *report) add(key string, rw row) *row {
	r.Rows = append(r.Rows, judgeRow(key, rw, 0))
	return &r.Rows[len(r.Rows)-1]
}

// vs is a row of value against a reference named refName.
func vs(measure, unit string, value, ref float64, refName string) row {
	return row{Measure: measure, Unit: unit, Value: value, Ref: ptr(ref), RefName: refName}
}

func fmtVal(v float64, unit string) string {
	switch unit {
	case "ops/s":
		return fmt.Sprintf("%.1f/s", v)
	case "s":
		if v < 10 {
			return fmt.Sprintf("%.2f s", v)
		}
		return fmt.Sprintf("%.1f s", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	case "ms":
		return fmt.Sprintf("%.1f ms", v)
	case "objects":
		return fmt.Sprintf("%.0f objects", v)
	case "IOPS":
		return fmt.Sprintf("%.0f IOPS", v)
	case "MB/s":
		return fmt.Sprintf("%.1f MB/s", v)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

// table writes the rows as a Markdown table.
func (r *report) table(w io.Writer) {
	fmt.Fprintln(w, "| | measure | driver | reference | ratio | target | | load |")
	fmt.Fprintln(w, "|---|---|---:|---|---:|---|---|---:|")
	for _, rw := range r.Rows {
		ref, ratio, met := "", "", ""
		if rw.Ref != nil {
			ref = fmtVal(*rw.Ref, rw.Unit)
			if rw.RefName != "" {
				ref += " " + rw.RefName
			}
		}
		if rw.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *rw.Ratio)
		}
		if rw.Met != nil {
			met = map[bool]string{true: "met", false: "**missed**"}[*rw.Met]
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", rw.ID, rw.Measure, fmtVal(rw.Value, rw.Unit), ref, ratio, rw.Target, met, rw.Load)
	}
}

// print writes the whole result: the header, the table of rows, how the
// sides were started and the targets that judge the rows.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "rbdcsi benchmarks, %s (%s)\n\n", r.Started, r.Host["summary"])
	r.table(w)
	if r.Sides != nil {
		fmt.Fprintln(w)
		r.Sides.print(w)
	}
	fmt.Fprintln(w, "\nTargets, fixed in the bench before the run (e2e/bench/targets.go):")
	fmt.Fprintln(w)
	// Those of the scenarios that gave rows; all, if none did.
	ids := map[string]bool{}
	for _, rw := range r.Rows {
		ids[rw.ID] = true
	}
	printTargets(w, ids)
}

// write stores the report as results/bench-<stamp>.json and the table as
// results/bench-<stamp>.md; it returns the JSON path.
func (r *report) write(dir, stamp string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bench-"+stamp+".json")
	if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
		return "", err
	}
	var md strings.Builder
	r.print(&md)
	return path, os.WriteFile(filepath.Join(dir, "bench-"+stamp+".md"), []byte(md.String()), 0o644)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
