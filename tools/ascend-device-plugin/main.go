// Command ascend-device-plugin is the local cluster's Ascend device plugin (testbed/node): it
// serves the kubelet's device-plugin API (k8s.io/kubelet deviceplugin/v1beta1) for one node,
// advertises huawei.com/Ascend910 and huawei.com/Ascend310P counts, and hands out device files
// the way Huawei's ascend-device-plugin does without the Ascend Docker Runtime ("origin mount
// way"): /dev/davinciN for each allocated NPU, plus davinci_manager, devmm_svm and hisi_hdc,
// each as a DeviceSpec with permissions "rw".
//
// There is no NPU on this machine. Each device file is a character device made with mknod in
// the node's own folder (-dev-dir), owned by HwHiAiUser's uid and gid (1000:1000 by default)
// with mode 0660, as on an Atlas host; its numbers are those of another character device of
// this machine (-backing, /dev/null by default), so that a process that passes the
// permission check opens a device the kernel really serves. The container runtime copies the
// file's numbers, owner and mode into the container (containerd's WithLinuxDevice), so a root
// container with every capability dropped opens /dev/davinci0 only through its group.
//
//	ascend-device-plugin -kubelet-dir ROOT/device-plugins -dev-dir DIR -resource huawei.com/Ascend910=8
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// The files Huawei's plugin mounts into every NPU container besides the NPUs themselves
// (ascend-device-plugin pkg/common: HiAIManagerDevice, HiAISVMDevice, HiAIHDCDevice).
var managementDevices = []string{"davinci_manager", "devmm_svm", "hisi_hdc"}

// resourceFlag collects -resource NAME=COUNT (repeatable).
type resourceFlag []resource

type resource struct {
	name  string // huawei.com/Ascend910
	count int
}

func (r *resourceFlag) String() string { return fmt.Sprint(*r) }

func (r *resourceFlag) Set(value string) error {
	name, count, ok := strings.Cut(value, "=")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 1 || !strings.HasPrefix(name, "huawei.com/Ascend") {
		return fmt.Errorf("want huawei.com/AscendKIND=COUNT (COUNT >= 1), got %q", value)
	}
	*r = append(*r, resource{name, n})
	return nil
}

// kind is the resource name's last part, as Huawei names devices: Ascend910-0, Ascend910-1...
func (r resource) kind() string { return r.name[strings.LastIndex(r.name, "/")+1:] }

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	res    resource
	first  int    // the index of this resource's first /dev/davinciN on the node
	devDir string // where the device files are
	socket string // this plugin's socket, in the kubelet's device-plugin folder
}

func (p *plugin) ids() []string {
	ids := make([]string, p.res.count)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", p.res.kind(), p.first+i)
	}
	return ids
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends every device once, healthy, and then holds the stream: nothing here
// ever turns unhealthy.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	devices := []*pluginapi.Device{}
	for _, id := range p.ids() {
		devices = append(devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Allocate returns, for each container, its NPUs' /dev/davinciN and the management devices.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	known := map[string]bool{}
	for _, id := range p.ids() {
		known[id] = true
	}
	answer := &pluginapi.AllocateResponse{}
	for _, container := range req.ContainerRequests {
		specs := []*pluginapi.DeviceSpec{}
		for _, name := range managementDevices {
			specs = append(specs, p.spec(name))
		}
		indexes := []int{}
		for _, id := range container.DevicesIds {
			if !known[id] {
				return nil, fmt.Errorf("no device %s on this node (%s)", id, p.res.name)
			}
			n, _ := strconv.Atoi(id[strings.LastIndex(id, "-")+1:])
			indexes = append(indexes, n)
		}
		sort.Ints(indexes)
		for _, n := range indexes {
			specs = append(specs, p.spec(fmt.Sprintf("davinci%d", n)))
		}
		log.Printf("allocate %s: %v", p.res.name, container.DevicesIds)
		answer.ContainerResponses = append(answer.ContainerResponses, &pluginapi.ContainerAllocateResponse{Devices: specs})
	}
	return answer, nil
}

func (p *plugin) spec(name string) *pluginapi.DeviceSpec {
	return &pluginapi.DeviceSpec{HostPath: filepath.Join(p.devDir, name), ContainerPath: "/dev/" + name, Permissions: "rw"}
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// makeDevices creates the node's device files (again, if they exist with other numbers or owner).
func makeDevices(dir string, names []string, rdev uint64, uid, gid int, mode uint32) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := syscall.Mknod(path, syscall.S_IFCHR|mode, int(rdev)); err != nil {
			return fmt.Errorf("mknod %s: %w", path, err)
		}
		// mknod's mode passes through the umask: set it, and the owner, explicitly.
		if err := os.Chmod(path, os.FileMode(mode)); err != nil {
			return err
		}
		if err := os.Chown(path, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// serve starts the plugin's gRPC server on its socket and registers it with the kubelet.
func (p *plugin) serve(kubeletDir string) (*grpc.Server, error) {
	_ = os.Remove(p.socket)
	listener, err := net.Listen("unix", p.socket)
	if err != nil {
		return nil, err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()
	if err := register(filepath.Join(kubeletDir, filepath.Base(pluginapi.KubeletSocket)), p); err != nil {
		server.Stop()
		return nil, err
	}
	return server, nil
}

func register(kubeletSocket string, p *plugin) error {
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(p.socket), ResourceName: p.res.name,
		Options: &pluginapi.DevicePluginOptions{},
	})
	return err
}

// inode identifies the kubelet's registration socket: a restarted kubelet makes a new one
// (and removes every plugin socket), so a changed inode means "register again".
func inode(path string) uint64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

func main() {
	var resources resourceFlag
	kubeletDir := flag.String("kubelet-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin folder (ROOT-DIR/device-plugins)")
	devDir := flag.String("dev-dir", "", "the folder this node's device files are made in")
	backing := flag.String("backing", "/dev/null", "a character device whose numbers the device files take")
	owner := flag.String("owner", "1000:1000", "UID:GID of the device files (HwHiAiUser on an Atlas host)")
	mode := flag.String("mode", "0660", "the device files' mode")
	flag.Var(&resources, "resource", "huawei.com/AscendKIND=COUNT, repeatable (e.g. huawei.com/Ascend910=8)")
	flag.Parse()
	log.SetPrefix("ascend-device-plugin: ")
	if *devDir == "" || len(resources) == 0 {
		log.Fatal("usage: ascend-device-plugin -kubelet-dir DIR -dev-dir DIR -resource huawei.com/AscendKIND=COUNT...")
	}
	uidText, gidText, _ := strings.Cut(*owner, ":")
	uid, errU := strconv.Atoi(uidText)
	gid, errG := strconv.Atoi(gidText)
	perm, errM := strconv.ParseUint(*mode, 8, 32)
	if errU != nil || errG != nil || errM != nil || perm > 0o777 {
		log.Fatalf("-owner wants UID:GID and -mode an octal mode, got %q and %q", *owner, *mode)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(*backing, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		log.Fatalf("-backing %s: not a character device (%v)", *backing, err)
	}

	plugins := []*plugin{}
	names := append([]string{}, managementDevices...)
	next := 0
	for _, res := range resources {
		kind := strings.ToLower(res.kind())
		plugins = append(plugins, &plugin{res: res, first: next, devDir: *devDir,
			socket: filepath.Join(*kubeletDir, "torchdag-"+kind+".sock")})
		for i := 0; i < res.count; i++ {
			names = append(names, fmt.Sprintf("davinci%d", next+i))
		}
		next += res.count
	}
	if err := makeDevices(*devDir, names, st.Rdev, uid, gid, uint32(perm)); err != nil {
		log.Fatal(err)
	}
	log.Printf("device files in %s: %s (%d:%d, mode %04o, numbers of %s)", *devDir, strings.Join(names, " "),
		uid, gid, perm, *backing)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	kubeletSocket := filepath.Join(*kubeletDir, filepath.Base(pluginapi.KubeletSocket))
	servers := map[*plugin]*grpc.Server{}
	registeredWith := uint64(0)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if current := inode(kubeletSocket); current != 0 && current != registeredWith {
			ok := true
			for _, p := range plugins {
				if old := servers[p]; old != nil {
					old.Stop()
				}
				server, err := p.serve(*kubeletDir)
				if err != nil {
					log.Printf("registering %s with the kubelet: %v (trying again)", p.res.name, err)
					ok = false
					break
				}
				servers[p] = server
				log.Printf("registered %s: %d devices (%s)", p.res.name, p.res.count, strings.Join(p.ids(), ", "))
			}
			if ok {
				registeredWith = current
			}
		}
		select {
		case <-stop:
			for p, server := range servers {
				server.Stop()
				_ = os.Remove(p.socket)
			}
			return
		case <-tick.C:
		}
	}
}
