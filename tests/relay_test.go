package tests

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgfanout/pgq/relay"
)

// natsPort is the port of the NATS server a test starts: PGQ_TEST_NATS_PORT
// (make test: NATS_PORT, TEST_PORT + 57; default 25490) plus offset, so
// tests running in parallel each have their own.
func natsPort(t *testing.T, offset int) int {
	t.Helper()
	port := 25490
	if p := os.Getenv("PGQ_TEST_NATS_PORT"); p != "" {
		var err error
		port, err = strconv.Atoi(p)
		require.NoError(t, err, "PGQ_TEST_NATS_PORT")
	}
	return port + offset
}

// natsServer is a real nats-server with JetStream on (file storage in dir),
// started by the test; Stop and Start restart it on the same port and store.
type natsServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startNATS(t *testing.T, offset int) *natsServer {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		root, _ := filepath.Abs("..")
		out, err := exec.Command(filepath.Join(root, "scripts", "deps.sh"), "ensure", "nats").CombinedOutput()
		require.NoError(t, err, "nats-server is required by this test (sudo make deps): %s", out)
	}
	s := &natsServer{t: t, port: natsPort(t, offset), dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func (s *natsServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Start runs nats-server and returns once it accepts connections.
func (s *natsServer) Start() {
	s.t.Helper()
	s.cmd = exec.Command("nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	require.NoError(s.t, s.cmd.Start())
	require.Eventually(s.t, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, 30*time.Second, 20*time.Millisecond, "nats-server did not start on port %d", s.port)
}

// Stop ends nats-server (SIGTERM: it flushes its store) and waits for it.
func (s *natsServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// jetStream connects to s (reconnecting forever) and returns JetStream.
func (s *natsServer) jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// streamIDs reads every message of a stream and returns how often each pgq
// message id (header Pgq-Id) is in it.
func streamIDs(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) map[int64]int {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	out := map[int64]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err, "stream %s seq %d", stream, seq)
		id, err := strconv.ParseInt(m.Header.Get(relay.HeaderID), 10, 64)
		require.NoError(t, err)
		require.Equal(t, relay.MsgID(m.Header.Get(relay.HeaderTopic), id), m.Header.Get(jetstream.MsgIDHeader))
		out[id]++
	}
	return out
}

func streamCount(ctx context.Context, js jetstream.JetStream, stream string) uint64 {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// buildBinary builds a command of this module into a temporary directory.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// process is a command the test runs, kills and restarts; its output is kept.
type process struct {
	mu  sync.Mutex
	buf strings.Builder
	cmd *exec.Cmd
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.Write(b)
}

func (p *process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

func (p *process) start(t *testing.T, bin string, env []string, args ...string) {
	t.Helper()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	cmd := p.cmd
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// stop sends SIGTERM and waits; the process must exit cleanly.
func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.cmd.Wait(), "%s", p.Output())
}

// The relay forwards a topic into a JetStream stream exactly once across a
// relay killed (SIGKILL) while pages are in flight, its restart, and a NATS
// server restarted under it: every message arrives, none twice.
func TestRelayNATSKillAndRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.Pool
	ctx := b.ctx
	b.createTopic(t, db, "relay.out", "semantics => 'pubsub'")
	b.subscribe(t, "relay.out", "nats")
	const first, second = 3000, 1000
	_, err := db.Exec(ctx, `SELECT fanout.publish_batch('relay.out',
	    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g))`, first)
	require.NoError(t, err)

	ns := startNATS(t, 0)
	js := ns.jetStream(t)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "RELAY", Subjects: []string{"pgq.relay.out"},
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute})
	require.NoError(t, err)

	bin := buildBinary(t, "../cmd/pgq-relay")
	args := []string{"--database-url", b.URL, "--nats-url", ns.URL(), "--topic", "relay.out", "--group", "nats",
		"--subject", "pgq.relay.out", "--stream", "RELAY", "--lease", "2s", "--max-messages", "200",
		"--poll-interval", "100ms"}
	var r1 process
	r1.start(t, bin, nil, args...)
	// Killed while it works through the backlog: its page's messages NATS
	// already stored are not acked in pgq and come back after the lease.
	require.Eventually(t, func() bool { return streamCount(ctx, js, "RELAY") >= 700 }, time.Minute, 5*time.Millisecond,
		"relay output:\n%s", r1.Output())
	r1.kill()
	killedAt := streamCount(ctx, js, "RELAY")
	require.Less(t, killedAt, uint64(first), "the relay was killed before it finished")

	var r2 process
	r2.start(t, bin, nil, args...)
	require.Eventually(t, func() bool { return streamCount(ctx, js, "RELAY") >= first }, 2*time.Minute,
		10*time.Millisecond, "relay output:\n%s", r2.Output())

	// NATS goes down while more is published, and comes back.
	ns.Stop()
	_, err = db.Exec(ctx, `SELECT fanout.publish_batch('relay.out',
	    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g))`, second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(r2.Output(), "NATS publish failed") }, time.Minute,
		10*time.Millisecond, "the relay tried NATS while it was down:\n%s", r2.Output())
	ns.Start()
	require.Eventually(t, func() bool { return streamCount(ctx, js, "RELAY") >= first+second }, 2*time.Minute,
		10*time.Millisecond, "relay output:\n%s", r2.Output())

	// The group has nothing left: the relay acked everything it forwarded.
	require.Eventually(t, func() bool {
		var lag, inFlight int64
		require.NoError(t, db.QueryRow(ctx, `SELECT lag_messages, in_flight FROM fanout.groups
		    WHERE topic = 'relay.out' AND group_name = 'nats'`).Scan(&lag, &inFlight))
		return lag == 0 && inFlight == 0
	}, time.Minute, 10*time.Millisecond)
	r2.stop(t)

	var ids []int64
	rows, err := db.Query(ctx, `SELECT id FROM fanout_data.`+b.dataTable(t, "relay.out")+` ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, first+second)
	got := streamIDs(t, ctx, js, "RELAY")
	lost, dups := 0, 0
	for _, id := range ids {
		switch n := got[id]; {
		case n == 0:
			lost++
		case n > 1:
			dups += n - 1
		}
	}
	require.Equal(t, 0, lost, "lost messages")
	require.Equal(t, 0, dups, "duplicates in the stream")
	require.Len(t, got, first+second, "nothing else in the stream")
	// The kill really left pages NATS stored but pgq never saw acked: the
	// second relay published some of them again and NATS dropped them.
	require.Regexp(t, `stopped published=\d+ duplicates=[1-9]`, r2.Output())
	t.Logf("relay: killed after %d messages in the stream; second run: %s", killedAt,
		r2.Output()[strings.LastIndex(r2.Output(), "stopped"):])
}
