package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// proc is a supervised child process: restarted restartDelay after it
// exits, until the supervisor stops.
type proc struct {
	name string
	exe  string
	args []string
	env  []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	starts   int
	failures int // exits we did not cause
	killed   bool
}

type supervisor struct {
	runDir       string
	log          *slog.Logger
	restartDelay time.Duration

	mu       sync.Mutex
	procs    []*proc
	stopping bool
	wg       sync.WaitGroup
}

func (s *supervisor) add(p *proc) error {
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return s.spawn(p)
}

func (s *supervisor) spawn(p *proc) error {
	logf, err := os.OpenFile(filepath.Join(s.runDir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.exe, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.killed = cmd, exited, false
	p.starts++
	p.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		logf.Close()
		close(exited)
		p.mu.Lock()
		if !p.killed {
			p.failures++
		}
		p.mu.Unlock()
		s.mu.Lock()
		stopping := s.stopping
		s.mu.Unlock()
		if stopping {
			return
		}
		if !p.killed {
			s.log.Warn("child exited on its own; restarting", "child", p.name, "error", err)
		}
		time.Sleep(s.restartDelay)
		s.mu.Lock()
		stopping = s.stopping
		s.mu.Unlock()
		if !stopping {
			if err := s.spawn(p); err != nil {
				s.log.Error("restart failed", "child", p.name, "error", err)
			}
		}
	}()
	return nil
}

// kill sends sig to p's current process (marking the exit as ours).
func (p *proc) kill(sig syscall.Signal) (pid int, exited <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0, nil
	}
	p.killed = true
	_ = p.cmd.Process.Signal(sig)
	return p.cmd.Process.Pid, p.exited
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

// stopAll stops every child: SIGTERM, then SIGKILL after grace.
func (s *supervisor) stopAll(ctx context.Context, grace time.Duration) {
	s.mu.Lock()
	s.stopping = true
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for _, p := range procs {
		p.kill(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(grace):
	case <-ctx.Done():
	}
	for _, p := range procs {
		p.kill(syscall.SIGKILL)
	}
	<-done
}

func (s *supervisor) failures() (n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		p.mu.Lock()
		n += p.failures
		p.mu.Unlock()
	}
	return n
}
