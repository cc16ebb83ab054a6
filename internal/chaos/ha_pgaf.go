package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgafCluster is pg_auto_failover (Debian postgresql-15-auto-failover,
// pg_autoctl 2.0) on loopback: a monitor and three data nodes, the formation
// at number_sync_standbys 1 (make ha HA=pgaf). Ports: the monitor
// base+30, the nodes base+31..+33.
type pgafCluster struct {
	dir      string
	monPort  int
	ports    map[string]int
	monitor  *supervised
	nodes    map[string]*supervised
	names    []string
	log      func(msg string, args ...any)
	pgConfig string
}

func newPgafCluster(dir string, base int, log func(string, ...any)) *pgafCluster {
	c := &pgafCluster{dir: dir, monPort: base + 30, ports: map[string]int{}, nodes: map[string]*supervised{}, log: log}
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		c.names = append(c.names, name)
		c.ports[name] = base + 31 + i
	}
	return c
}

func (c *pgafCluster) label() string {
	return "pg_auto_failover 2.0, monitor + 3 nodes, number_sync_standbys 1"
}

func (c *pgafCluster) env() []string {
	return []string{"PG_CONFIG=" + c.pgConfig, "XDG_CONFIG_HOME=" + filepath.Join(c.dir, "cfg"),
		"XDG_DATA_HOME=" + filepath.Join(c.dir, "share"), "XDG_RUNTIME_DIR=" + filepath.Join(c.dir, "run")}
}

func (c *pgafCluster) monitorURL() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=3", c.monPort)
}

// autoctl runs one pg_autoctl command to its end.
func (c *pgafCluster) autoctl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := asPG("pg_autoctl", args...)
	cmd.Env = append(os.Environ(), c.env()...)
	out, err := cmd.CombinedOutput()
	_ = ctx
	if err != nil {
		return fmt.Errorf("pg_autoctl %s: %w: %s", strings.Join(args, " "), err, lastLines(string(out), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// listenLoopback makes a created (stopped) cluster listen on 127.0.0.1 only
// (pg_autoctl's monitor listens on every address otherwise).
func listenLoopback(pgdata string) error {
	f, err := os.OpenFile(filepath.Join(pgdata, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString("listen_addresses = '127.0.0.1'\n")
	return err
}

func (c *pgafCluster) start(ctx context.Context) error {
	if err := os.RemoveAll(c.dir); err != nil {
		return err
	}
	for _, d := range []string{"cfg", "share", "run"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o700); err != nil {
			return err
		}
	}
	bindir, err := pgBinDir()
	if err != nil {
		return err
	}
	c.pgConfig = filepath.Join(bindir, "pg_config")
	if _, err := os.Stat(c.pgConfig); err != nil {
		c.pgConfig = "pg_config"
	}
	if u := pgUser(); u != "" {
		if out, err := exec.Command("chown", "-R", u+":", c.dir).CombinedOutput(); err != nil {
			return fmt.Errorf("chown %s: %w: %s", c.dir, err, out)
		}
	}
	mon := filepath.Join(c.dir, "mon")
	if err := c.autoctl(ctx, "create", "monitor", "--pgdata", mon, "--pgport", strconv.Itoa(c.monPort),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"); err != nil {
		return err
	}
	_ = asPGEnv(c.env(), filepath.Join(filepath.Dir(c.pgConfig), "pg_ctl"), "stop", "-D", mon, "-m", "fast").Run()
	if err := listenLoopback(mon); err != nil {
		return err
	}
	if c.monitor, err = startSupervised("monitor", mon, filepath.Join(c.dir, "monitor.log"), c.env(),
		"pg_autoctl", "run", "--pgdata", mon); err != nil {
		return err
	}
	if err := waitFor(ctx, 60*time.Second, func() error {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=3", c.monPort))
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		// Failure detection in seconds, not tens of seconds (the monitor's
		// defaults: a health check every 5 s, unhealthy after 20 s).
		for _, s := range []string{
			`ALTER SYSTEM SET pgautofailover.health_check_period = 1000`,
			`ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000`,
			`ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 6000`,
			// The old primary is given 10 s (default 30 s) to demote
			// itself before a standby is promoted; the data nodes demote
			// themselves after 5 s without the monitor and any standby
			// (timeout.network_partition_timeout below), well within it.
			`ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 10000`,
			`SELECT pg_reload_conf()`,
		} {
			if _, err := conn.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	for i, name := range c.names {
		if err := c.createNode(ctx, name); err != nil {
			return err
		}
		if err := waitFor(ctx, 120*time.Second, func() error {
			st, err := c.states(ctx)
			if err != nil {
				return err
			}
			settled := 0
			for _, s := range st {
				if s.reported == s.goal && (s.goal == "single" || s.goal == "primary" || s.goal == "secondary") {
					settled++
				}
			}
			if settled < i+1 {
				return fmt.Errorf("node %s not settled: %v", name, st)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := c.autoctl(ctx, "config", "set", "--pgdata", filepath.Join(c.dir, name),
			"timeout.network_partition_timeout", "5"); err != nil {
			return err
		}
	}
	conn, err := pgx.Connect(ctx, c.monitorURL())
	if err != nil {
		return err
	}
	// pg_autoctl 2.0's "set formation number-sync-standbys" rejects every
	// number; the monitor's function does the same thing.
	_, err = conn.Exec(ctx, `SELECT pgautofailover.set_formation_number_sync_standbys('default', 1)`)
	conn.Close(context.Background())
	if err != nil {
		return fmt.Errorf("number_sync_standbys: %w", err)
	}
	return c.waitHealthy(ctx, 120*time.Second)
}

func asPGEnv(env []string, name string, args ...string) *exec.Cmd {
	cmd := asPG(name, args...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

func (c *pgafCluster) createNode(ctx context.Context, name string) error {
	pgdata := filepath.Join(c.dir, name)
	s, err := startSupervised(name, pgdata, filepath.Join(c.dir, name+".log"), c.env(),
		"pg_autoctl", "create", "postgres", "--pgdata", pgdata, "--pgport", strconv.Itoa(c.ports[name]),
		"--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", name, "--auth", "trust", "--no-ssl",
		"--monitor", c.monitorURL(), "--run")
	if err != nil {
		return err
	}
	c.nodes[name] = s
	return nil
}

type pgafState struct{ name, reported, goal string }

func (s pgafState) String() string { return s.name + " " + s.reported + "/" + s.goal }

func (c *pgafCluster) states(ctx context.Context) ([]pgafState, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.monitorURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node ORDER BY nodeid`)
	if err != nil {
		return nil, err
	}
	var out []pgafState
	for rows.Next() {
		var s pgafState
		if err := rows.Scan(&s.name, &s.reported, &s.goal); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (c *pgafCluster) leader() (string, error) {
	st, err := c.states(context.Background())
	if err != nil {
		return "", err
	}
	for _, s := range st {
		if s.reported == "primary" && s.goal == "primary" {
			return s.name, nil
		}
	}
	return "", nil
}

func (c *pgafCluster) waitHealthy(ctx context.Context, within time.Duration) error {
	var last []pgafState
	err := waitFor(ctx, within, func() error {
		st, err := c.states(ctx)
		if err != nil {
			return err
		}
		last = st
		prim, sec := 0, 0
		for _, s := range st {
			if s.reported != s.goal {
				continue
			}
			switch s.goal {
			case "primary":
				prim++
			case "secondary":
				sec++
			}
		}
		if prim != 1 || sec != 2 {
			return fmt.Errorf("not yet: %v", st)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pg_auto_failover formation not healthy within %s: %w", within, err)
	}
	c.log("pg_auto_failover formation healthy", "nodes", fmt.Sprint(last))
	return nil
}

func (c *pgafCluster) switchover(ctx context.Context, from, to string) error {
	mon := filepath.Join(c.dir, "mon")
	if to == "" {
		return c.autoctl(ctx, "perform", "switchover", "--pgdata", mon)
	}
	return c.autoctl(ctx, "perform", "promotion", "--pgdata", mon, "--name", to)
}

func (c *pgafCluster) crash(name string) error {
	s := c.nodes[name]
	if s == nil {
		return fmt.Errorf("no node %q", name)
	}
	return s.crash()
}

func (c *pgafCluster) restart(name string) error {
	pgdata := filepath.Join(c.dir, name)
	s, err := startSupervised(name, pgdata, filepath.Join(c.dir, name+".log"), c.env(),
		"pg_autoctl", "run", "--pgdata", pgdata)
	if err != nil {
		return err
	}
	c.nodes[name] = s
	return nil
}

func (c *pgafCluster) rewound(name string) bool {
	return patroniLogHas(filepath.Join(c.dir, name+".log"), "pg_rewind")
}

func (c *pgafCluster) nodeURL(name, db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=3", c.ports[name], db)
}

func (c *pgafCluster) multiURL(db string) string {
	hosts := make([]string, len(c.names))
	for i, n := range c.names {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", c.ports[n])
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=3",
		strings.Join(hosts, ","), db)
}

func (c *pgafCluster) stop() {
	for _, name := range c.names {
		if s := c.nodes[name]; s != nil {
			s.stop(20 * time.Second)
		}
	}
	if c.monitor != nil {
		c.monitor.stop(20 * time.Second)
	}
}
