package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vastrun/vastrun/internal/container"
)

// The image path: with Config.Images set, each instance pulls its image
// from the registry the reference names (while it shows "loading"), runs
// one long-lived container of it, and every SSH exec or shell session of
// the instance runs inside that container (`podman exec`), as on a Vast
// host. The instance's sandbox directory is bind-mounted at the same path,
// so uploads over SFTP, the working directory and the API's copy and
// execute routes see the same files inside and outside, and the fake
// nvidia-smi is on PATH (and at /usr/bin/nvidia-smi, where the NVIDIA
// container toolkit puts it). The container shares the host's network, as
// the sandbox does, so port forwards to the instance's loopback reach a
// server started in it. A pull that fails leaves the instance "created"
// with the status message docker prints on a Vast host; the engine's own
// reason is kept in it.

// boxState is where an instance's container is.
type boxState int

const (
	boxPulling boxState = iota // pulling the image and starting the container
	boxReady
	boxFailed
)

// imageBox is one instance's container.
type imageBox struct {
	eng  *container.Engine
	ref  string
	name string // the container's name (unique to this server and instance)

	mu       sync.Mutex
	state    boxState
	failMsg  string // Vast's status_msg when failed
	initPID  int    // host pid of the container's pid 1
	imgPath  string // the image's own PATH
	settled  bool   // the start goroutine is over
	removed  bool   // the instance was destroyed
	cancel   context.CancelFunc
	sessions int // numbers the pid files of sessions
}

// keepAlive is the container's pid 1: it only waits (reaping orphans) so
// that sessions can come and go; SIGTERM ends it.
const keepAlive = `trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done`

// startBox begins pulling in's image and starting its container in the
// background. Called with s.mu held, after the sandbox exists.
func (s *Server) startBox(in *instance, login *string) {
	ctx, cancel := context.WithCancel(s.boxCtx)
	b := &imageBox{eng: s.cfg.Images, ref: in.Image, name: fmt.Sprintf("vastrun-sim-%s-%d", s.token, in.ID), cancel: cancel}
	in.box = b
	env := map[string]string{}
	for _, kv := range in.Env {
		if !strings.HasPrefix(kv[0], "-") {
			env[kv[0]] = kv[1]
		}
	}
	id := strconv.FormatInt(in.ID, 10)
	env["CONTAINER_ID"], env["CONTAINER_API_KEY"], env["VAST_CONTAINERLABEL"], env["PUBLIC_IPADDR"] = id, in.APIKey, "C."+id, "127.0.0.1"
	if v := s.clockSpeed(); v != "" {
		env[ClockSpeedEnv] = v
	}
	spec := container.Detached{
		Name: b.name, Image: in.Image, Network: "host", Env: env,
		Labels:     map[string]string{"vastrun.sim": s.token, "vastrun.sim.instance": id},
		Mounts:     []container.Mount{{Host: in.sandbox, Container: in.sandbox}, {Host: filepath.Join(in.sandbox, ".sim/bin/nvidia-smi"), Container: "/usr/bin/nvidia-smi", ReadOnly: true}},
		Entrypoint: "/bin/sh", Command: []string{"-c", keepAlive},
	}
	creds := loginCredentials(login)
	s.boxes.Add(1)
	go func() {
		defer s.boxes.Done()
		state, msg, pid, path := b.bringUp(ctx, spec, creds)
		b.mu.Lock()
		b.state, b.failMsg, b.initPID, b.imgPath, b.settled = state, msg, pid, path, true
		removed := b.removed
		b.mu.Unlock()
		if state == boxFailed {
			s.log.Info("image pull failed", "instance", in.ID, "image", b.ref, "status_msg", msg)
		}
		if removed {
			s.removeBox(b)
		}
	}()
}

// bringUp pulls, starts and inspects the container.
func (b *imageBox) bringUp(ctx context.Context, spec container.Detached, creds *container.Credentials) (boxState, string, int, string) {
	if err := b.eng.Pull(ctx, b.ref, creds); err != nil {
		return boxFailed, pullStatusMsg(b.ref, err), 0, ""
	}
	imgEnv, err := b.eng.ImageEnv(ctx, b.ref)
	if err != nil {
		return boxFailed, "Error response from daemon: " + err.Error(), 0, ""
	}
	if _, err := b.eng.Start(ctx, spec); err != nil {
		var re *container.RunError
		reason := err.Error()
		if errors.As(err, &re) {
			reason = strings.TrimPrefix(lastLine(re.Output), "Error: ")
		}
		return boxFailed, "Error response from daemon: failed to create task for container: OCI runtime create failed: " + reason, 0, ""
	}
	pid, err := b.eng.InitPID(ctx, b.name)
	if err != nil || pid <= 0 {
		return boxFailed, fmt.Sprintf("Error response from daemon: container %s is not running (%v)", b.name, err), 0, ""
	}
	return boxReady, "", pid, imgEnv["PATH"]
}

// pullStatusMsg is what a Vast host's docker prints for a failed pull,
// with the engine's reason: "manifest for REF not found" when the
// registry does not have it, else the registry's or network's error.
func pullStatusMsg(ref string, err error) string {
	var pe *container.PullError
	if !errors.As(err, &pe) {
		return "Error response from daemon: " + err.Error()
	}
	if pe.ManifestUnknown {
		return fmt.Sprintf("Error response from daemon: manifest for %s not found: manifest unknown: manifest unknown", ref)
	}
	reason := pe.Reason
	// Podman names the step ("initializing source docker://REF: pinging
	// container registry HOST: ..."); docker prints only the cause.
	for _, prefix := range []string{"initializing source docker://" + ref + ": ", "pinging container registry "} {
		if r, ok := strings.CutPrefix(reason, prefix); ok {
			reason = r
			if prefix == "pinging container registry " {
				if _, after, ok := strings.Cut(r, ": "); ok {
					reason = after
				}
			}
		}
	}
	return "Error response from daemon: " + reason
}

// loginCredentials reads Vast's image_login form "-u USER -p TOKEN REGISTRY".
func loginCredentials(login *string) *container.Credentials {
	if login == nil {
		return nil
	}
	f := strings.Fields(*login)
	if len(f) != 5 || f[0] != "-u" || f[2] != "-p" {
		return nil
	}
	return &container.Credentials{User: f[1], Token: f[3], Registry: f[4]}
}

// status says where the container is, and Vast's message if it failed.
func (b *imageBox) status() (boxState, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.failMsg
}

// destroy marks the box gone and stops a pull in flight; it returns true
// when the caller must remove the container (the start is over).
func (b *imageBox) destroy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.removed {
		return false
	}
	b.removed = true
	b.cancel()
	return b.settled
}

// removeBox removes the container in the background; Close waits for it.
func (s *Server) removeBox(b *imageBox) {
	s.boxes.Add(1)
	go func() {
		defer s.boxes.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := b.eng.Remove(ctx, b.name); err != nil {
			s.log.Error("remove instance container", "container", b.name, "err", err)
		}
	}()
}

// nsProcs maps the pids (as seen inside) of the processes in the pid
// namespace of host pid init to their host pids.
func nsProcs(init int) map[int]int {
	out := map[int]int{}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	if err != nil {
		return out
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		status, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if inner, err := strconv.Atoi(f[len(f)-1]); err == nil {
					out[inner] = pid
				}
			}
		}
	}
	return out
}

// killAll kills every process in the container but its pid 1, as stopping
// a Vast container kills everything the sessions started (setsid and nohup
// jobs included), while the container itself stays for a restart.
func (b *imageBox) killAll() {
	b.mu.Lock()
	init := b.initPID
	b.mu.Unlock()
	if init <= 0 {
		return
	}
	for inner, host := range nsProcs(init) {
		if inner != 1 {
			syscall.Kill(host, syscall.SIGKILL) //nolint:errcheck // the process may have exited already; nothing else to do
		}
	}
}

// signal sends sig to the process group of the session whose shell wrote
// its in-container pid to pidFile (the session's shell leads its own group
// inside the container).
func (b *imageBox) signal(pidFile string, sig syscall.Signal) {
	b.mu.Lock()
	init := b.initPID
	b.mu.Unlock()
	raw, err := os.ReadFile(pidFile)
	if err != nil || init <= 0 {
		return
	}
	inner, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return
	}
	if host, ok := nsProcs(init)[inner]; ok {
		syscall.Kill(-host, sig) //nolint:errcheck // the process may have exited already; nothing else to do
	}
}

// newPidFile names a new session's pid file.
func (b *imageBox) newPidFile(sandbox string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions++
	return filepath.Join(sandbox, ".sim/run", fmt.Sprintf("session-%d.pid", b.sessions))
}

// execEnv is the session environment inside the container: the
// simulator's, with PATH = the fake nvidia-smi's directory, then the
// image's own PATH.
func (b *imageBox) execEnv(sandbox string, env []string) map[string]string {
	b.mu.Lock()
	path := b.imgPath
	b.mu.Unlock()
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	m["PATH"] = filepath.Join(sandbox, ".sim/bin") + ":" + path
	return m
}

// sessionArgv is the shell a session runs in the container: it first
// writes its pid (signals are sent to its process group from the host),
// then becomes the client's command, or an interactive shell.
func sessionArgv(pidFile, raw string) []string {
	if raw == "" {
		return []string{"/bin/sh", "-c", `echo $$ > "$0" || exit 255; exec /bin/sh`, pidFile}
	}
	return []string{"/bin/sh", "-c", `echo $$ > "$0" || exit 255; exec /bin/sh -c "$1"`, pidFile, raw}
}

// sessionCmd is the host side of a session in the container: `podman
// exec`, with the host's environment (the engine's own configuration) and
// the session's passed into the container by name.
func (b *imageBox) sessionCmd(in *instance, raw string, env []string, term string, tty bool) (cmd *exec.Cmd, pidFile string, done func(), err error) {
	if st, _ := b.status(); st != boxReady {
		return nil, "", nil, fmt.Errorf("the instance's container is not running")
	}
	pidFile = b.newPidFile(in.sandbox)
	m := b.execEnv(in.sandbox, env)
	if tty {
		m["TERM"] = term
	}
	cmd, done, err = b.eng.ExecCommand(container.Exec{Container: b.name, Dir: in.workspace(), Env: m, TTY: tty, Argv: sessionArgv(pidFile, raw)})
	if err != nil {
		return nil, "", nil, err
	}
	cmd.Env = os.Environ()
	return cmd, pidFile, done, nil
}

// closeBoxes ends pulls in flight, removes every container this server
// started (and any its goroutines left) and the images it pulled.
func (s *Server) closeBoxes(insts []*instance) {
	if s.cfg.Images == nil {
		return
	}
	s.boxCancel()
	refs := map[string]bool{}
	for _, in := range insts {
		if in.box == nil {
			continue
		}
		refs[in.box.ref] = true
		if in.box.destroy() {
			s.removeBox(in.box)
		}
	}
	s.boxes.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	left, err := s.cfg.Images.Containers(ctx, "vastrun.sim="+s.token)
	if err != nil {
		s.log.Error("list instance containers", "err", err)
	}
	for _, id := range left {
		if err := s.cfg.Images.Remove(ctx, id); err != nil {
			s.log.Error("remove instance container", "container", id, "err", err)
		}
	}
	for ref := range refs {
		s.cfg.Images.RemoveImage(ctx, ref) //nolint:errcheck // best effort: another server may use it
	}
}

// ImageLabel is the label (KEY=VALUE) on every container this server
// starts, for listing what it left.
func (s *Server) ImageLabel() string { return "vastrun.sim=" + s.token }
