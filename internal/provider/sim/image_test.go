package sim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/pkg/sftp"
	"github.com/vastrun/vastrun/internal/container"
	"github.com/vastrun/vastrun/internal/provider"
	"github.com/vastrun/vastrun/internal/provider/sim"
	"github.com/vastrun/vastrun/internal/provider/vast"
	"github.com/vastrun/vastrun/internal/publish/registrytest"
	gossh "golang.org/x/crypto/ssh"
)

// The image path for real: Podman pulls the pinned image from a real OCI
// registry on 127.0.0.1 and the instance's SSH sessions run inside it. It
// runs with VASTRUN_TEST_PODMAN=required (set by .ci/run once Podman has
// run a container there, with the CONTAINERS_CONF it needs); then a
// missing or broken Podman fails it. Otherwise it reports itself as
// skipped, NOT RUN, never as passed.
func podmanEngine(t *testing.T) *container.Engine {
	t.Helper()
	if mode := os.Getenv("VASTRUN_TEST_PODMAN"); mode != "required" {
		t.Skipf("NOT RUN: VASTRUN_TEST_PODMAN=%q, not required (.ci/run sets it after trying Podman, and prints why when it cannot run)", mode)
	}
	eng, err := container.Detect(context.Background(), "podman")
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// pushImage builds a busybox image holding files and pushes it to a fresh
// registry on loopback; it returns the reference pinned by digest.
func pushImage(t *testing.T, files map[string]string) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox-static is not installed (apt-get install busybox-static)")
	}
	img, err := registrytest.BusyboxImage(bb, files)
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(registrytest.Options{})
	t.Cleanup(reg.Close)
	repo := registrytest.Host(reg) + "/acme/simimage"
	ref, err := name.ParseReference(repo+":1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return repo + "@" + d.String()
}

func rentImage(t *testing.T, e *env, image string) provider.InstanceID {
	t.Helper()
	q, _ := vast.ParseQuery("num_gpus=1 gpu_name=RTX_4090", vast.QueryOptions{Order: "dph_total"})
	offers, err := e.client.SearchOffers(context.Background(), q)
	if err != nil || len(offers) == 0 {
		t.Fatalf("search: %v", err)
	}
	res, err := e.client.CreateInstance(context.Background(), provider.CreateRequest{OfferID: offers[0].ID, Image: image, DiskGB: 20, Label: "simimage"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return res.InstanceID
}

// settle advances the simulated clock until the instance leaves loading
// (the pull runs in wall time), bounded by a wall-clock deadline. With
// pulling, it must have been seen loading first.
func settle(t *testing.T, e *env, id provider.InstanceID, pulling bool) provider.Instance {
	t.Helper()
	sawLoading := false
	deadline := time.Now().Add(3 * time.Minute)
	for {
		e.clk.Advance(10 * time.Second)
		inst, err := e.client.ShowInstance(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		switch inst.ActualStatus {
		case "loading":
			sawLoading = true
		case "running", "created":
			if inst.ActualStatus == "created" && inst.StatusMsg == "" {
				break
			}
			if pulling && !sawLoading {
				t.Fatalf("%s without loading (pulling) first: %+v", inst.ActualStatus, inst)
			}
			return inst
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance still %s (%s) after 3 minutes", inst.ActualStatus, inst.StatusMsg)
		}
		time.Sleep(50 * time.Millisecond) // the pull runs in wall time
	}
}

func leftContainers(t *testing.T, eng *container.Engine, s *sim.Server) []string {
	t.Helper()
	ids, err := eng.Containers(context.Background(), s.ImageLabel())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestInstanceRunsInsideItsImage(t *testing.T) {
	eng := podmanEngine(t)
	image := pushImage(t, map[string]string{"opt/model/weights.txt": "only in the image\n"})
	e := newEnv(t, sim.Config{Images: eng})
	ctx := context.Background()
	id := rentImage(t, e, image)
	signer, pub := newKeyPair(t)
	if err := e.client.AttachSSHKey(ctx, id, pub); err != nil {
		t.Fatal(err)
	}
	inst := settle(t, e, id, true)
	if !inst.Running() {
		t.Fatalf("not running: %+v", inst)
	}
	if _, err := os.Stat("/opt/model/weights.txt"); err == nil {
		t.Fatal("this host has /opt/model/weights.txt: the test cannot tell image from host")
	}
	c, err := dialSSH(inst, signer)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The image's own file, the fake nvidia-smi (on PATH and where the
	// NVIDIA toolkit mounts it), Vast's and the create's environment.
	out, code := run(t, c, `cat /opt/model/weights.txt; nvidia-smi -L; /usr/bin/nvidia-smi -L | wc -l; echo "id=$CONTAINER_ID"; pwd`)
	if code != 0 || !strings.Contains(out, "only in the image") || !strings.Contains(out, "GPU 0: NVIDIA GeForce RTX 4090") ||
		!strings.Contains(out, fmt.Sprintf("id=%d", id)) || !strings.Contains(out, "/workspace") {
		t.Fatalf("inside the image: %d\n%s", code, out)
	}
	// Exit status, stdin and stderr are the command's.
	if _, code := run(t, c, "echo oops >&2; exit 7"); code != 7 {
		t.Fatalf("exit code %d, want 7", code)
	}
	sess, _ := c.NewSession()
	sess.Stdin = strings.NewReader("from stdin\n")
	var stderr strings.Builder
	sess.Stderr = &stderr
	got, err := sess.Output("read line; echo \"got: $line\"; echo to-stderr >&2")
	sess.Close()
	if err != nil || string(got) != "got: from stdin\n" || stderr.String() != "to-stderr\n" {
		t.Fatalf("stdin/stdout/stderr: %v %q %q", err, got, stderr.String())
	}

	// An upload over SFTP lands where the commands inside look.
	sc, err := sftp.NewClient(c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := sc.Create("uploaded.txt")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "uploaded\n")
	f.Close()
	sc.Close()
	if out, _ := run(t, c, "cat uploaded.txt; ls /opt/model"); out != "uploaded\nweights.txt\n" {
		t.Fatalf("upload inside the container: %q", out)
	}

	// A signal reaches the session's process group inside the container.
	sess, _ = c.NewSession()
	stdout, _ := sess.StdoutPipe()
	if err := sess.Start("trap 'echo got-term; exit 143' TERM; echo ready; while :; do sleep 0.05; done"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	io.ReadFull(stdout, buf)
	if err := sess.Signal(gossh.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	err = sess.Wait()
	var ee *gossh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 143 || !strings.Contains(string(rest), "got-term") {
		t.Fatalf("signal: %v %q", err, rest)
	}

	// A pseudo-terminal session gets a terminal inside the container.
	sess, _ = c.NewSession()
	if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	got, err = sess.CombinedOutput("test -t 0 && test -t 1 && echo \"tty $TERM\"; cat /opt/model/weights.txt")
	sess.Close()
	if err != nil || !strings.Contains(string(got), "tty xterm") || !strings.Contains(string(got), "only in the image") {
		t.Fatalf("pty session: %v %q", err, got)
	}

	// ssh_drop cuts the live connection; ssh_stall hangs it; a new
	// connection reaches the same container.
	for _, kind := range []string{sim.FaultSSHDrop, sim.FaultSSHStall} {
		sess, _ = c.NewSession()
		stdout, _ := sess.StdoutPipe()
		if err := sess.Start("echo up; sleep 300"); err != nil {
			t.Fatal(err)
		}
		io.ReadFull(stdout, make([]byte, 3))
		if err := e.sim.Inject(sim.Fault{Kind: kind, Instance: int64(id)}); err != nil {
			t.Fatal(err)
		}
		if kind == sim.FaultSSHDrop {
			if err := sess.Wait(); err == nil {
				t.Fatal("a dropped connection's command ended cleanly")
			}
		}
		c.Close()
		if c, err = dialSSH(inst, signer); err != nil {
			t.Fatalf("after %s: %v", kind, err)
		}
		if out, code := run(t, c, "cat /opt/model/weights.txt"); code != 0 || out != "only in the image\n" {
			t.Fatalf("after %s: %d %q", kind, code, out)
		}
	}

	// Stop kills what the sessions left behind (a detached job), keeps the
	// files; start runs again in the same container.
	run(t, c, "setsid nohup sleep 300 >/dev/null 2>&1 </dev/null & echo kept > kept.txt")
	c.Close()
	if err := e.client.StopInstance(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := e.client.StartInstance(ctx, id); err != nil {
		t.Fatal(err)
	}
	inst = settle(t, e, id, false)
	c, err = dialSSH(inst, signer)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, c, "cat kept.txt; ps -o comm | grep -c '^sleep$'"); out != "kept\n1\n" { // only pid 1's own sleep
		t.Fatalf("after stop and start: %q", out)
	}
	c.Close()

	if err := e.client.DestroyInstance(ctx, id); err != nil {
		t.Fatal(err)
	}
	e.assertNoLeaks(t)
	e.sim.Close() // waits for the removal
	if left := leftContainers(t, eng, e.sim); len(left) != 0 {
		t.Fatalf("containers left after destroy and close: %v", left)
	}
	if !strings.Contains(e.sim.InstanceRuntime(image), "inside the pinned image "+image) {
		t.Fatalf("runtime note: %q", e.sim.InstanceRuntime(image))
	}
}

// A digest the registry does not have, and a registry that does not
// answer: the instance stays "created" with the message docker prints on
// a Vast host, carrying the engine's reason; no container is left.
func TestImagePullFailureIsVastsStatus(t *testing.T) {
	eng := podmanEngine(t)
	image := pushImage(t, map[string]string{"opt/x": "x"})
	repo, _, _ := strings.Cut(image, "@")
	missing := repo + "@sha256:" + strings.Repeat("0", 64)
	e := newEnv(t, sim.Config{Images: eng})
	ctx := context.Background()
	for _, tc := range []struct{ image, want string }{
		{missing, "Error response from daemon: manifest for " + missing + " not found: manifest unknown: manifest unknown"},
		{"127.0.0.1:1/acme/gone@sha256:" + strings.Repeat("1", 64), `Error response from daemon: Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused`},
	} {
		id := rentImage(t, e, tc.image)
		inst := settle(t, e, id, true)
		if inst.ActualStatus != "created" || inst.StatusMsg != tc.want {
			t.Errorf("%s: %s %q, want created %q", tc.image, inst.ActualStatus, inst.StatusMsg, tc.want)
		}
		if err := e.client.DestroyInstance(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	e.assertNoLeaks(t)
	e.sim.Close()
	if left := leftContainers(t, eng, e.sim); len(left) != 0 {
		t.Fatalf("containers left: %v", left)
	}
}
