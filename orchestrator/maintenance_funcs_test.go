package orchestrator

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fanout.maint_functions() names exactly the functions that
// fanout.maint_operations() can list, and each of them exists.
func TestMaintenanceFunctionsMatchOperations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var src string
	require.NoError(t, b.Pool.QueryRow(b.ctx,
		`SELECT prosrc FROM pg_proc WHERE oid = 'fanout.maint_operations'::regproc`).Scan(&src))
	var listed []string
	for _, m := range regexp.MustCompile(`'(fanout\.[a-z_]+)'`).FindAllStringSubmatch(src, -1) {
		listed = append(listed, m[1])
	}
	slices.Sort(listed)

	fns, err := MaintenanceFuncs(b.ctx, b.Pool, SchedulerConfig{})
	require.NoError(t, err)
	var names []string
	for _, f := range fns {
		names = append(names, f.Func)
		require.NotEmpty(t, f.Purpose, f.Func)
		require.EqualValues(t, 1, b.int(t, `SELECT count(*) FROM pg_proc WHERE oid = to_regproc($1)`, f.Func), f.Func)
	}
	slices.Sort(names)
	require.Equal(t, listed, names)
	require.Len(t, names, 9)
}

// At start the scheduler registers every maintenance function, due or not,
// and logs them with their schedules (flags win over the defaults).
func TestRunRegistersAllMaintenanceAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.scheduler(t, SchedulerConfig{LeaderID: "m", Schedules: map[string]string{cleanupPartitions: "@every 1m"}})
	require.Len(t, s.Jobs(), 1, "only discover before Run")
	start(t, s)
	require.Eventually(t, func() bool { return len(s.Jobs()) == 10 }, 60*time.Second, 10*time.Millisecond,
		"discover plus the nine maintenance functions")
	require.Equal(t, "@every 1m", jobStatus(t, s, cleanupPartitions).Schedule)
	require.Equal(t, DefaultScheduleFor(managePartitions, false), jobStatus(t, s, managePartitions).Schedule)
	require.Equal(t, DefaultBackfillSchedule, jobStatus(t, s, "fanout._bitmap_step").Schedule)

	logs := b.logs.String()
	require.Contains(t, logs, `"msg":"maintenance functions","count":9`)
	require.Contains(t, logs, `"fanout._cleanup_partitions @every 1m"`)
	require.True(t, strings.Contains(logs, `"fanout._detect_dead_groups `+DefaultScheduleFor("fanout._detect_dead_groups", false)+`"`))
}
