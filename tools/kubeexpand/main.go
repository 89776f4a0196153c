// kubeexpand applies Kubernetes' own `$(VAR)` expansion, from k8s.io/kubernetes at the
// pinned release, to containers read from standard input: the oracle the tests hold
// torchdag's Python port (testbed/runtime/expand.py) against.
//
// Input: a JSON list of {"env": [[name, value], ...], "command": [...], "args": [...]}.
// Output: a JSON list of {"env": [[name, expanded], ...], "command": [...], "args": [...]}.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

type container struct {
	Env     [][2]string `json:"env"`
	Command []string    `json:"command"`
	Args    []string    `json:"args"`
}

// expand follows the kubelet: each env value expands against the variables defined
// before it (makeEnvironmentVariables in pkg/kubelet/kubelet_pods.go, without service
// links), then command and args against the whole env, where a later duplicate name wins
// (ExpandContainerCommandAndArgs in pkg/kubelet/container/helpers.go).
func expand(c container) container {
	defined := map[string]string{}
	out := container{Env: [][2]string{}, Command: []string{}, Args: []string{}}
	for _, pair := range c.Env {
		value := expansion.Expand(pair[1], expansion.MappingFuncFor(defined))
		defined[pair[0]] = value
		out.Env = append(out.Env, [2]string{pair[0], value})
	}
	whole := expansion.MappingFuncFor(defined)
	for _, word := range c.Command {
		out.Command = append(out.Command, expansion.Expand(word, whole))
	}
	for _, word := range c.Args {
		out.Args = append(out.Args, expansion.Expand(word, whole))
	}
	return out
}

func main() {
	var containers []container
	if err := json.NewDecoder(os.Stdin).Decode(&containers); err != nil {
		fmt.Fprintf(os.Stderr, "kubeexpand: reading a JSON list of containers: %v\n", err)
		os.Exit(2)
	}
	results := make([]container, 0, len(containers))
	for _, c := range containers {
		results = append(results, expand(c))
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintf(os.Stderr, "kubeexpand: %v\n", err)
		os.Exit(1)
	}
}
