package findings

import (
	"context"
	"fmt"
	"strings"
)

// Attribute fills in, from the samples of each finding's time range and
// vitals, the processes (when the filter named none), the code sites (the
// heaviest stacks, with their top frames) and references to the heaviest
// samples.
func Attribute(ctx context.Context, q Querier, host string, fs []Finding) error {
	for i := range fs {
		f := &fs[i]
		if len(f.Vitals) == 0 {
			continue
		}
		var vs []string
		for _, v := range f.Vitals {
			vs = append(vs, sqlString(v))
		}
		where := fmt.Sprintf(`s.host = %s AND s.ts_ns >= %d AND s.ts_ns < %d AND s.vital IN (%s)`,
			sqlString(host), f.StartNs, f.EndNs, strings.Join(vs, ", "))
		if len(f.Processes) > 0 {
			var pids []string
			for _, p := range f.Processes {
				pids = append(pids, fmt.Sprint(p.Pid))
			}
			where += fmt.Sprintf(" AND s.pid IN (%s)", strings.Join(pids, ", "))
		} else {
			res, err := q.Query(ctx, `SELECT pid, any_value(comm), any_value(exe), any_value(vital), CAST(sum(weight) AS DOUBLE) AS w
				FROM samples s WHERE `+where+` GROUP BY pid ORDER BY w DESC LIMIT 3`)
			if err != nil {
				return fmt.Errorf("attribute %s: %w", f.Rule, err)
			}
			for _, r := range res.Rows {
				f.Processes = append(f.Processes, Process{Pid: uint32(toInt(r[0])), Comm: fmt.Sprint(r[1]), Exe: fmt.Sprint(r[2]),
					Vital: fmt.Sprint(r[3]), Weight: toFloat(r[4])})
			}
		}
		res, err := q.Query(ctx, `WITH x AS (SELECT vital, unnest([kstack_id, ustack_id]) AS id, CAST(weight AS DOUBLE) AS w FROM samples s WHERE `+where+`)
			SELECT any_value(x.vital), x.id, st.kind, st.frames[1:6], sum(x.w) AS w FROM x JOIN stacks st ON st.stack_id = x.id
			GROUP BY x.id, st.kind, st.frames ORDER BY w DESC, x.id LIMIT 3`)
		if err != nil {
			return fmt.Errorf("attribute %s: %w", f.Rule, err)
		}
		for _, r := range res.Rows {
			site := Site{Vital: fmt.Sprint(r[0]), StackID: uint64(toInt(r[1])), Kind: fmt.Sprint(r[2]), Weight: toFloat(r[4])}
			if frames, ok := r[3].([]any); ok {
				for _, fr := range frames {
					site.Frames = append(site.Frames, fmt.Sprint(fr))
				}
			}
			f.Sites = append(f.Sites, site)
		}
		if len(f.Samples) == 0 {
			res, err := q.Query(ctx, `SELECT epoch, ts_ns, vital, pid FROM samples s WHERE `+where+` ORDER BY weight DESC, ts_ns LIMIT 5`)
			if err != nil {
				return fmt.Errorf("attribute %s: %w", f.Rule, err)
			}
			for _, r := range res.Rows {
				f.Samples = append(f.Samples, SampleRef{Epoch: toInt(r[0]), TsNs: toInt(r[1]), Vital: fmt.Sprint(r[2]), Pid: uint32(toInt(r[3]))})
			}
		}
	}
	return nil
}
