package orchestrator

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteStatus prints st as aligned text tables: the leader, topics, groups
// (lag, dead groups) and running backfills.
func WriteStatus(w io.Writer, st *Stats) error {
	var b strings.Builder
	if st.Leader != nil {
		fmt.Fprintf(&b, "leader: %s (lease expires in %s)\n", st.Leader.ID, roundDur(st.Leader.ExpiresIn))
	} else {
		b.WriteString("leader: none (no pgq-scheduler is running maintenance)\n")
	}

	b.WriteString("\nTOPICS\n")
	if len(st.Topics) == 0 {
		b.WriteString("no topics (create one with: SELECT fanout.create_topic('name');)\n")
	} else {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tSEMANTICS\tCOMPLETION\tACTIVE GROUPS\tMESSAGES\tOLDEST\tSEGMENTS\tSIZE\tDROPPED UNREAD")
		for _, r := range st.Topics {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				r.Text("topic"), dash(r.Text("semantics")), dash(r.Text("completion")),
				count(r, "active_groups"), count(r, "messages"), age(r, "oldest_message_age"),
				count(r, r.SegmentsCol()), size(r, "bytes"), count(r, "dropped_unread"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	b.WriteString("\nGROUPS\n")
	switch {
	case !st.GroupsAvailable:
		b.WriteString("(this schema version has no fanout.groups view)\n")
	case len(st.Groups) == 0:
		b.WriteString("no groups\n")
	default:
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tGROUP\tSTATUS\tMEMBERS\tLAG\tLAG AGE\tOLDEST UNACKED\tIN FLIGHT\tDEAD LETTERS\tLOST\tLAST HEARTBEAT\tBACKFILL")
		for _, r := range st.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				r.Text("topic"), groupName(r), dash(strings.ToUpper(r.Text("status"))),
				count(r, "members"), count(r, "lag_messages"), age(r, "lag_seconds"),
				age(r, "oldest_unacked_age"), count(r, "in_flight"), count(r, "dead_letters"),
				count(r, "lost_messages"), ago(r, "last_heartbeat"), backfillSummary(r))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		var dead []string
		for _, r := range st.Groups {
			if r.Text("status") == "dead" {
				dead = append(dead, r.Text("topic")+"/"+groupName(r))
			}
		}
		if len(dead) > 0 {
			fmt.Fprintf(&b, "\ndead groups: %d (%s); they no longer pin storage: fanout.resurrect_group(topic, group_name) brings one back\n",
				len(dead), strings.Join(dead, ", "))
		}
		var bf []Row
		for _, r := range st.Groups {
			if backfillActive(r) {
				bf = append(bf, r)
			}
		}
		if len(bf) > 0 {
			b.WriteString("\nBACKFILLS\n")
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tGROUP\tSTATUS\tPROCESSED\tTOTAL\tPROGRESS\tRATE/S\tETA")
			for _, r := range bf {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
					r.Text("topic"), groupName(r), r.Text("backfill_status"),
					count(r, "backfill_processed"), count(r, "backfill_total"), progress(r),
					rate(r, "backfill_rate"), age(r, "backfill_eta"))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	if st.Maintenance != nil {
		b.WriteString("\nMAINTENANCE (every function the schema has; each runs when fanout.maint_operations() says it is due)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "FUNCTION\tSCHEDULE\tPURPOSE")
		for _, f := range st.Maintenance {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Func, f.Schedule, f.Purpose)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("(schedules as `pgq-scheduler run` sets them by default; --schedule and --default-schedule change them)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func groupName(r Row) string {
	if g := r.Text("group_name"); g != "" {
		return g
	}
	return "(queue)"
}

func count(r Row, col string) string {
	v, ok := r.Float(col)
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func rate(r Row, col string) string {
	v, ok := r.Float(col)
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// age prints an interval or a number of seconds as a rounded duration.
func age(r Row, col string) string {
	v, ok := r.Float(col)
	if !ok {
		return "-"
	}
	return roundDur(time.Duration(finite(v) * float64(time.Second)))
}

func ago(r Row, col string) string {
	t, ok := r.Time(col)
	if !ok {
		return "-"
	}
	return roundDur(time.Since(t)) + " ago"
}

func roundDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func size(r Row, col string) string {
	v, ok := r.Float(col)
	if !ok {
		return "-"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func progress(r Row) string {
	p, ok1 := r.Float("backfill_processed")
	t, ok2 := r.Float("backfill_total")
	if !ok1 || !ok2 || t <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*p/t)
}

// backfillActive: the group has a backfill that is not finished (or one
// that failed): statuses that mean "nothing to do" are left out.
func backfillActive(r Row) bool {
	switch r.Text("backfill_status") {
	case "", "none", "not_needed", "done", "complete", "completed", "finished":
		return false
	}
	return true
}

func backfillSummary(r Row) string {
	s := r.Text("backfill_status")
	if !backfillActive(r) {
		return "-"
	}
	if p := progress(r); p != "-" {
		return s + " " + p
	}
	return s
}
