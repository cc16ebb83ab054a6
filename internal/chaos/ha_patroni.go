package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// patroniCluster is etcd plus three Patroni nodes on loopback, all started
// by the harness (make ha): the configuration is deploy/ha/patroni.yml.in.
// PostgreSQL refuses to run as root, so as root every Patroni runs as the
// OS user postgres (runuser), like scripts/devdb.sh's clusters.
type patroniCluster struct {
	dir      string // working folder (reachable by the postgres user)
	root     string // repository checkout
	etcdPort int
	nodes    []*patroniNode
	log      func(msg string, args ...any)

	etcd *exec.Cmd
	// etcdExited is closed once etcd's process has been waited for.
	etcdExited chan struct{}
}

type patroniNode struct {
	name     string
	pgPort   int
	restPort int
	dir      string
	cmd      *exec.Cmd
	exited   chan struct{}
	logf     *os.File
}

// haPorts: etcd client base+0, peer base+1; node i PostgreSQL base+10+i,
// REST API base+20+i.
func newPatroniCluster(root, dir string, base int, log func(string, ...any)) *patroniCluster {
	c := &patroniCluster{dir: dir, root: root, etcdPort: base, log: log}
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		c.nodes = append(c.nodes, &patroniNode{name: name, pgPort: base + 10 + i, restPort: base + 20 + i,
			dir: filepath.Join(dir, name)})
	}
	return c
}

func (n *patroniNode) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=3", n.pgPort, db)
}

// multiURL is the clients' URL: every node, the read-write one chosen at
// connect time.
func (c *patroniCluster) multiURL(db string) string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.pgPort)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=3",
		strings.Join(hosts, ","), db)
}

func (c *patroniCluster) node(name string) *patroniNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// pgUser is the OS user the servers run as ("" = the current one).
func pgUser() string {
	if os.Geteuid() != 0 {
		return ""
	}
	return "postgres"
}

func asPG(name string, args ...string) *exec.Cmd {
	if u := pgUser(); u != "" {
		return exec.Command("runuser", append([]string{"-u", u, "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func pgBinDir() (string, error) {
	ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(ds) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(ds[i], "postgres")); err == nil {
			return ds[i], nil
		}
	}
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		return "", errors.New("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
	}
	return strings.TrimSpace(string(out)), nil
}

// startEtcd starts etcd and waits until it is healthy. Its ports lie in
// Linux's ephemeral range, where another process's outgoing connection may
// hold one for a moment: a start that fails on "address already in use" is
// tried again (as scripts/devdb.sh does for PostgreSQL).
func (c *patroniCluster) startEtcd(ctx context.Context) error {
	logPath := filepath.Join(c.dir, "etcd.log")
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort+1)
	client := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	for attempt := 1; ; attempt++ {
		etcdLog, err := os.Create(logPath)
		if err != nil {
			return err
		}
		c.etcd = exec.Command("etcd", "--name", "ha", "--data-dir", filepath.Join(c.dir, "etcd"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "ha="+peer, "--initial-cluster-state", "new")
		c.etcd.Stdout, c.etcd.Stderr = etcdLog, etcdLog
		c.etcd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.etcd.Start(); err != nil {
			etcdLog.Close()
			return fmt.Errorf("start etcd: %w", err)
		}
		exited := make(chan struct{})
		c.etcdExited = exited
		go func() { _ = c.etcd.Wait(); etcdLog.Close(); close(exited) }()
		err = waitFor(ctx, 30*time.Second, func() error {
			select {
			case <-exited:
				return errors.New("etcd exited")
			default:
			}
			resp, err := http.Get(client + "/health")
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		})
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			if attempt < 6 && strings.Contains(string(b), "address already in use") {
				c.log("etcd: a port is taken for now; retrying", "attempt", attempt)
				time.Sleep(2 * time.Second)
				continue
			}
		default:
		}
		return fmt.Errorf("etcd not healthy: %w", err)
	}
}

// start wipes the working folder, starts etcd and the three nodes, and
// waits until one leads and both others stream from it synchronously.
func (c *patroniCluster) start(ctx context.Context) error {
	if err := os.RemoveAll(c.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	bindir, err := pgBinDir()
	if err != nil {
		return err
	}
	tmpl, err := os.ReadFile(filepath.Join(c.root, "deploy", "ha", "patroni.yml.in"))
	if err != nil {
		return err
	}
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			return err
		}
		cfg := strings.NewReplacer("@NAME@", n.name, "@RESTPORT@", strconv.Itoa(n.restPort),
			"@ETCDPORT@", strconv.Itoa(c.etcdPort), "@PGPORT@", strconv.Itoa(n.pgPort), "@DIR@", n.dir,
			"@BINDIR@", bindir).Replace(string(tmpl))
		if err := os.WriteFile(filepath.Join(n.dir, "patroni.yml"), []byte(cfg), 0o600); err != nil {
			return err
		}
		if u := pgUser(); u != "" {
			if out, err := exec.Command("chown", "-R", u+":", n.dir).CombinedOutput(); err != nil {
				return fmt.Errorf("chown %s: %w: %s", n.dir, err, out)
			}
		}
	}
	if err := os.Chmod(c.dir, 0o755); err != nil {
		return err
	}
	// The first node alone, so that it bootstraps; then the replicas.
	if err := c.nodes[0].start(); err != nil {
		return err
	}
	if err := waitFor(ctx, 90*time.Second, func() error {
		st, err := c.status()
		if err != nil {
			return err
		}
		if st.leader() == "" {
			return errors.New("no leader yet")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	for _, n := range c.nodes[1:] {
		if err := n.start(); err != nil {
			return err
		}
	}
	return c.waitHealthy(ctx, 120*time.Second, 2)
}

func (n *patroniNode) start() error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "patroni.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := asPG("patroni", filepath.Join(n.dir, "patroni.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: the SIGKILL of the crash takes Patroni, and
	// PostgreSQL separately (Patroni starts it in its own session anyway).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start patroni %s: %w", n.name, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.logf = cmd, exited, logf
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return nil
}

// patroniPID is the Patroni process itself (runuser's child, as root).
func (n *patroniNode) patroniPID() int {
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	pid := n.cmd.Process.Pid
	if pgUser() != "" {
		if out, err := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output(); err == nil {
			if p, err := strconv.Atoi(strings.Fields(string(out))[0]); err == nil {
				return p
			}
		}
	}
	return pid
}

// postmasterPID reads data/postmaster.pid (0 when absent).
func (n *patroniNode) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(n.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return p
}

// crash SIGKILLs the node's Patroni, then its postmaster and every
// PostgreSQL child process of it: nothing is shut down cleanly.
func (n *patroniNode) crash() error {
	pm := n.postmasterPID()
	var children []int
	if pm != 0 {
		if out, err := exec.Command("pgrep", "-P", strconv.Itoa(pm)).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if p, err := strconv.Atoi(f); err == nil {
					children = append(children, p)
				}
			}
		}
	}
	if p := n.patroniPID(); p != 0 {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	if n.cmd != nil && n.cmd.Process != nil {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	if pm == 0 {
		return fmt.Errorf("crash %s: no postmaster.pid", n.name)
	}
	_ = syscall.Kill(pm, syscall.SIGKILL)
	for _, p := range children {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	<-n.exited
	if n.logf != nil {
		n.logf.Close()
	}
	return nil
}

// stop stops Patroni (SIGTERM: it stops its PostgreSQL), SIGKILL after
// grace.
func (n *patroniNode) stop(grace time.Duration) {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.exited:
		return
	default:
	}
	if p := n.patroniPID(); p != 0 {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	select {
	case <-n.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		if pm := n.postmasterPID(); pm != 0 {
			_ = syscall.Kill(pm, syscall.SIGKILL)
		}
		<-n.exited
	}
	if n.logf != nil {
		n.logf.Close()
	}
}

func (c *patroniCluster) stop() {
	for _, n := range c.nodes {
		n.stop(20 * time.Second)
	}
	if c.etcd != nil && c.etcd.Process != nil {
		_ = c.etcd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.etcdExited:
		case <-time.After(10 * time.Second):
			_ = c.etcd.Process.Kill()
			<-c.etcdExited
		}
	}
}

// patroniStatus is GET /cluster of Patroni's REST API.
type patroniStatus struct {
	Members []struct {
		Name     string `json:"name"`
		Role     string `json:"role"`
		State    string `json:"state"`
		Timeline int    `json:"timeline"`
		Lag      any    `json:"lag"`
	} `json:"members"`
}

func (s *patroniStatus) leader() string {
	for _, m := range s.Members {
		if m.Role == "leader" && m.State == "running" {
			return m.Name
		}
	}
	return ""
}

func (s *patroniStatus) syncStreaming() []string {
	var names []string
	for _, m := range s.Members {
		if m.Role == "sync_standby" && (m.State == "streaming" || m.State == "running") {
			names = append(names, m.Name)
		}
	}
	return names
}

func (s *patroniStatus) String() string {
	var parts []string
	for _, m := range s.Members {
		parts = append(parts, fmt.Sprintf("%s %s %s tl%d", m.Name, m.Role, m.State, m.Timeline))
	}
	return strings.Join(parts, "; ")
}

// status asks the nodes in turn (any live one answers for the cluster).
func (c *patroniCluster) status() (*patroniStatus, error) {
	var lastErr error
	hc := http.Client{Timeout: 2 * time.Second}
	for _, n := range c.nodes {
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/cluster", n.restPort))
		if err != nil {
			lastErr = err
			continue
		}
		var st patroniStatus
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		return &st, nil
	}
	return nil, fmt.Errorf("no Patroni REST API answers: %w", lastErr)
}

// waitHealthy waits for a running leader and nSync synchronous standbys
// streaming from it.
func (c *patroniCluster) waitHealthy(ctx context.Context, within time.Duration, nSync int) error {
	var last string
	err := waitFor(ctx, within, func() error {
		st, err := c.status()
		if err != nil {
			return err
		}
		last = st.String()
		if st.leader() == "" || len(st.syncStreaming()) < nSync {
			return fmt.Errorf("not yet: %s", last)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("patroni cluster not healthy within %s: %w", within, err)
	}
	c.log("patroni cluster healthy", "members", last)
	return nil
}

// switchover asks Patroni to hand the leader role from leader to
// candidate ("" = Patroni's choice among the synchronous standbys).
func (c *patroniCluster) switchover(leader, candidate string) error {
	body := map[string]string{"leader": leader}
	if candidate != "" {
		body["candidate"] = candidate
	}
	b, _ := json.Marshal(body)
	n := c.node(leader)
	hc := http.Client{Timeout: 60 * time.Second}
	resp, err := hc.Post(fmt.Sprintf("http://127.0.0.1:%d/switchover", n.restPort), "application/json", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("switchover %s -> %q: %w", leader, candidate, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("switchover %s -> %q: %s: %s", leader, candidate, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// waitFor calls f every 250 ms until it returns nil, ctx ends or within
// passes.
func waitFor(ctx context.Context, within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
