package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// haManager is an HA manager under test (make ha: Patroni; make ha
// HA=pgaf: pg_auto_failover): three PostgreSQL nodes on loopback, named,
// that the run switches over, crashes and restarts.
type haManager interface {
	// label names the manager and its mode in the report.
	label() string
	start(ctx context.Context) error
	stop()
	// leader is the node that accepts writes now ("" when none).
	leader() (string, error)
	// waitHealthy waits for a leader and two streaming synchronous-capable
	// standbys.
	waitHealthy(ctx context.Context, within time.Duration) error
	// switchover hands the leader role from `from` to `to` ("" = the
	// manager's choice).
	switchover(ctx context.Context, from, to string) error
	// crash SIGKILLs the node's manager process and its PostgreSQL.
	crash(name string) error
	// restart starts the node's manager again (it rejoins).
	restart(name string) error
	// rewound reports whether the node's log says pg_rewind ran.
	rewound(name string) bool
	nodeURL(name, db string) string
	multiURL(db string) string
}

// Patroni as an haManager.
func (c *patroniCluster) label() string {
	return "Patroni 3, etcd, 3 nodes, synchronous_mode strict"
}

func (c *patroniCluster) leader() (string, error) {
	st, err := c.status()
	if err != nil {
		return "", err
	}
	return st.leader(), nil
}

func (c *patroniCluster) waitHealthyAll(ctx context.Context, within time.Duration) error {
	return c.waitHealthy(ctx, within, 2)
}

func (c *patroniCluster) crashNode(name string) error {
	n := c.node(name)
	if n == nil {
		return fmt.Errorf("no node %q", name)
	}
	return n.crash()
}

func (c *patroniCluster) restartNode(name string) error {
	n := c.node(name)
	if n == nil {
		return fmt.Errorf("no node %q", name)
	}
	return n.start()
}

func (c *patroniCluster) nodeDir(name string) string {
	if n := c.node(name); n != nil {
		return n.dir
	}
	return ""
}

// patroniManager adapts patroniCluster to haManager (its own methods keep
// their Patroni-specific signatures).
type patroniManager struct{ *patroniCluster }

func (m patroniManager) waitHealthy(ctx context.Context, within time.Duration) error {
	return m.waitHealthyAll(ctx, within)
}
func (m patroniManager) switchover(_ context.Context, from, to string) error {
	return m.patroniCluster.switchover(from, to)
}
func (m patroniManager) crash(name string) error   { return m.crashNode(name) }
func (m patroniManager) restart(name string) error { return m.restartNode(name) }
func (m patroniManager) rewound(name string) bool {
	return patroniLogHas(filepath.Join(m.nodeDir(name), "patroni.log"), "pg_rewind")
}
func (m patroniManager) nodeURL(name, db string) string {
	if n := m.node(name); n != nil {
		return n.url(db)
	}
	return ""
}

// supervised is a manager process of the harness in a process group of its
// own, with the data folder of the PostgreSQL it runs (pgdata).
type supervised struct {
	name   string
	pgdata string
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
}

func startSupervised(name, pgdata, logPath string, env []string, prog string, args ...string) (*supervised, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := asPG(prog, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &supervised{name: name, pgdata: pgdata, cmd: cmd, exited: make(chan struct{}), logf: logf}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// crash SIGKILLs the process group (the manager and what it started in it),
// then the postmaster and its children.
func (s *supervised) crash() error {
	pm := postmasterOf(s.pgdata)
	children := childrenOf(pm)
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	if pm == 0 {
		return fmt.Errorf("crash %s: no postmaster.pid", s.name)
	}
	_ = syscall.Kill(pm, syscall.SIGKILL)
	for _, p := range children {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	<-s.exited
	s.logf.Close()
	return nil
}

// stop: SIGTERM to the group, SIGKILL after grace.
func (s *supervised) stop(grace time.Duration) {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	// A postmaster left behind (it runs in the group, but be sure).
	if pm := postmasterOf(s.pgdata); pm != 0 && syscall.Kill(pm, 0) == nil {
		_ = syscall.Kill(pm, syscall.SIGTERM)
		for range 40 {
			if syscall.Kill(pm, 0) != nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	s.logf.Close()
}

func postmasterOf(pgdata string) int {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return p
}

func childrenOf(pid int) []int {
	if pid == 0 {
		return nil
	}
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	if err != nil {
		return nil
	}
	var ps []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}
