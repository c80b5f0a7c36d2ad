package agentsidecar_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-sidecar/agent-sidecar/clients/go/agentsidecar"
)

// The package's tests share one real stack: the LLM simulator, the example tool servers
// and a sidecar, started by the project's launcher (python -m sidecar.testing).
var (
	sidecarAddress string
	client         *agentsidecar.Client
)

const launcherStartTimeout = 90 * time.Second

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	stack, err := startLauncher()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the sidecar:", err)
		return 1
	}
	defer stack.stop()
	sidecarAddress = stack.address
	client, err = agentsidecar.Dial(sidecarAddress)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dialling the sidecar:", err)
		return 1
	}
	defer client.Close()
	code := m.Run()
	if logs := stack.logs.String(); code != 0 && logs != "" {
		fmt.Fprintf(os.Stderr, "--- the launcher's stderr ---\n%s\n", logs)
	}
	return code
}

// launcher is a running `python -m sidecar.testing`.
type launcher struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	address string
	logs    *syncBuffer
}

// startLauncher starts the launcher with $AGENT_SIDECAR_PYTHON (default: the repo's
// .venv/bin/python) in the repository's root and waits for its `listening on` line.
func startLauncher() (*launcher, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	python := os.Getenv("AGENT_SIDECAR_PYTHON")
	if python == "" {
		python = filepath.Join(root, ".venv", "bin", "python")
	}
	cmd := exec.Command(python, "-m", "sidecar.testing")
	cmd.Dir = root
	logs := &syncBuffer{}
	cmd.Stderr = logs
	stdin, err := cmd.StdinPipe() // the launcher stops at EOF on its stdin
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l := &launcher{cmd: cmd, stdin: stdin, logs: logs}
	lines := make(chan string)
	go func() {
		defer close(lines)
		scanner := bufio.NewScanner(stdout)
		scanner.Buffer(make([]byte, 64*1024), 1024*1024)
		for scanner.Scan() {
			lines <- scanner.Text()
		}
	}()
	timeout := time.After(launcherStartTimeout)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				l.stop()
				return nil, fmt.Errorf("the launcher exited before listening:\n%s", logs.String())
			}
			if rest, found := strings.CutPrefix(line, "listening on "); found {
				l.address = strings.TrimSpace(rest)
				go func() { // keep draining stdout so the launcher never blocks on it
					for range lines {
					}
				}()
				return l, nil
			}
		case <-timeout:
			l.stop()
			return nil, fmt.Errorf("the launcher did not listen within %s:\n%s", launcherStartTimeout, logs.String())
		}
	}
}

// stop closes the launcher's stdin (it stops everything it started and exits) and waits
// for it, killing it if it takes longer than 20 s.
func (l *launcher) stop() {
	_ = l.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- l.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = l.cmd.Process.Kill()
		<-done
	}
}

// repoRoot is the directory holding sidecar/testing, above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "sidecar", "testing", "__main__.py")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no sidecar/testing above the working directory")
		}
		dir = parent
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
